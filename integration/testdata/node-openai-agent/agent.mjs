// An agent as a team writes one: the official openai package from its package.json,
// configured by nothing but the environment the sandbox sets. It makes a chat call
// and a streamed one and prints one JSON line per call.
import OpenAI from 'openai';

const openai = new OpenAI({ maxRetries: 0 });
const model = process.env.COGNI_MODEL;

const chat = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hello.' }] });
console.log(JSON.stringify({ op: 'chat', id: chat.id, usage: chat.usage }));

const stream = await openai.chat.completions.create({
  model, stream: true, stream_options: { include_usage: true },
  messages: [{ role: 'user', content: 'Count to three.' }],
});
let chunks = 0, usage = null;
for await (const c of stream) {
  chunks++;
  if (c.usage) usage = c.usage;
}
console.log(JSON.stringify({ op: 'chat_stream', chunks, usage }));
