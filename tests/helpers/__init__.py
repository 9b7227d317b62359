"""Test doubles shared by the suite: fake tokenizer / engine / tools, a fake OpenAI server, episode builders."""
