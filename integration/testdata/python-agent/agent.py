# An agent with a Debian package dependency (python3-yaml, a C extension) and a local
# module, calling the LLM through the sandbox's proxy with the standard library only.
import json
import os
import urllib.request

import yaml

from helper import task

base = os.environ["OPENAI_BASE_URL"]
req = urllib.request.Request(
    base + "/chat/completions",
    data=json.dumps({"model": os.environ["COGNI_MODEL"], "messages": [{"role": "user", "content": task()}]}).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
)
with urllib.request.urlopen(req, timeout=30) as resp:
    body = json.load(resp)
print(yaml.safe_dump({"answer": body["choices"][0]["message"]["content"], "tokens": body["usage"]["total_tokens"]}))
