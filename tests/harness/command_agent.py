"""A command-line agent: configured only by the environment, as an unchanged CLI harness is.

The `openai` client reads OPENAI_BASE_URL and OPENAI_API_KEY itself; the task comes as JSON
in $AGENTRL_TASK; the answer is the last line printed.
"""

from __future__ import annotations

import json
import os

from harness_agents import arithmetic
from openai import OpenAI

task = json.loads(os.environ["AGENTRL_TASK"])
client = OpenAI(max_retries=0)
reply = client.chat.completions.create(
    model="policy", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
)
print("model said:", reply.choices[0].message.content)
print(arithmetic(task["prompt"].split("What is", 1)[-1].split("?", 1)[0].strip()))
