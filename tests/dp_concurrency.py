"""Greedy completions of 16 prompts sent all at once equal the same prompts sent one at a time
(and, given a second server, that server's answers). Usage: [API_KEY=K] dp_concurrency.py URL
[REF_URL]"""
import concurrent.futures
import json
import os
import sys
import urllib.request

PROMPTS = ["Once upon a time", "The capital of France", "It is a truth universally acknowledged",
           "In the beginning", "She said that", "The old man", "A long time ago in",
           "When the sun rose", "He opened the door and", "There was once a", "The king and the",
           "My dear friend,", "After the war", "The river ran", "In a small village",
           "It was the best of times"]


def complete(url, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 24, "temperature": 0}).encode()
    headers = {"Content-Type": "application/json"}
    if os.environ.get("API_KEY"):
        headers["Authorization"] = "Bearer " + os.environ["API_KEY"]
    req = urllib.request.Request(url + "/v1/completions", body, headers)
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)["choices"][0]["text"]


def main():
    url = sys.argv[1]
    alone = [complete(url, p) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda p: complete(url, p), PROMPTS))
    bad = [(p, a, t) for p, a, t in zip(PROMPTS, alone, together) if a != t]
    for p, a, t in bad:
        print(f"{p!r}: alone {a!r}, with 15 others {t!r}")
    if len(sys.argv) > 2:
        ref = [complete(sys.argv[2], p) for p in PROMPTS]
        for p, a, r in zip(PROMPTS, alone, ref):
            if a != r:
                bad.append(p)
                print(f"{p!r}: {a!r}, the reference server {r!r}")
    sys.exit(1 if bad else 0)


main()
