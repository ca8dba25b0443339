"""RemoteGenerator on two real llama-cpp-python servers with the test model; one of them
is killed (SIGKILL) in the middle of a job."""

from __future__ import annotations

import httpx
import pytest

from llamabatch import SamplingParams
from llamabatch.remote import RemoteGenerator

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0)


def _direct(url: str, prompt: str, max_tokens: int) -> str:
    """The greedy reply of one server to a plain HTTP call (the reference)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "top_k": 40,
            "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0}
    answer = httpx.post(url + "/v1/completions", json=body, timeout=120).json()
    return answer["choices"][0]["text"]


def test_killing_one_of_two_servers_mid_job_completes_every_item_once_in_order(
        start_servers):
    a, b = start_servers(2)
    prompts = [f"Item {i}: the colour of the sky on day {i} is" for i in range(14)]
    done = []
    with RemoteGenerator([a.url, b.url], max_tokens=8, sampling=GREEDY, backoff_s=0.05,
                         cooldown_s=600, timeout_s=120) as gen:
        for group in gen.iter_groups(prompts):
            done.extend(group)
            if len(done) >= 2 and b.process.poll() is None:
                b.kill()
        stats = gen.stats
        assert not gen.servers[1].is_up
    assert [c.index for c in done] == list(range(len(prompts)))
    assert all(c.ok and c.path == "remote" and c.n_tokens >= 1 for c in done), done
    assert any(c.server == b.url for c in done)  # b worked before it was killed
    assert stats.servers[b.url]["faults"] >= 1 and stats.retries >= 1
    assert all(c.server == a.url for c in done if c.attempts > 1)
    for c, prompt in zip(done, prompts):  # each reply is its own prompt's greedy reply
        assert c.text == _direct(a.url, prompt, 8), c


def test_messages_choices_and_usage_on_a_real_server(two_servers):
    urls = [s.url for s in two_servers]
    items = [[{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
             {"prompt": "Is fire cold? Answer:", "choices": ["yes", "no"]},
             {"prompt": "Count: 1, 2, 3,", "max_tokens": 3}]
    with RemoteGenerator(urls, max_tokens=8, sampling=GREEDY) as gen:
        done = gen.complete_many(items)
    assert all(c.ok for c in done), done
    assert done[0].text and done[0].n_prompt_tokens > 5
    assert done[1].text in ("yes", "no")
    assert done[2].n_tokens <= 3 and done[2].finish_reason == "length"
