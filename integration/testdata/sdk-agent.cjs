// An agent that uses the official OpenAI and Anthropic Node SDKs exactly as their
// READMEs show, configured by nothing but the environment the sandbox sets
// (OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY). It prints
// one JSON line per API call and exits non-zero if any call failed.
const OpenAI = require('/opt/app/node_modules/openai');
const Anthropic = require('/opt/app/node_modules/@anthropic-ai/sdk');

const model = process.env.COGNI_MODEL;
const out = (op, v) => console.log(JSON.stringify({ op, ...v }));

async function main() {
  const openai = new OpenAI({ maxRetries: 0 });
  const anthropic = new Anthropic({ maxRetries: 0 });
  let failed = 0;
  const step = async (op, fn) => {
    try {
      out(op, await fn());
    } catch (e) {
      failed++;
      out(op, { error: String(e && e.message ? e.message : e) });
    }
  };
  await step('models', async () => {
    const ids = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    return { ids };
  });
  await step('chat', async () => {
    const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hello.' }] });
    return { id: r.id, text: r.choices[0].message.content, usage: r.usage };
  });
  await step('chat_stream', async () => {
    const s = await openai.chat.completions.create({
      model, stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Count to three.' }],
    });
    let text = '', usage = null, chunks = 0;
    for await (const c of s) {
      chunks++;
      if (c.choices && c.choices[0] && c.choices[0].delta && c.choices[0].delta.content) text += c.choices[0].delta.content;
      if (c.usage) usage = c.usage;
    }
    return { chunks, text, usage };
  });
  await step('embeddings', async () => {
    const r = await openai.embeddings.create({ model, input: ['first text', 'second text'] });
    return { vectors: r.data.length, dims: r.data[0].embedding.length, usage: r.usage };
  });
  await step('responses', async () => {
    const r = await openai.responses.create({ model, input: 'Say hello in one word.' });
    return { id: r.id, text: r.output_text, usage: r.usage };
  });
  await step('anthropic_messages', async () => {
    const r = await anthropic.messages.create({
      model: process.env.ANTHROPIC_MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'Say hello.' }],
    });
    return { id: r.id, text: r.content[0].text, usage: r.usage };
  });
  process.exitCode = failed ? 1 : 0;
}

main().catch((e) => { console.error(e); process.exitCode = 2; });
