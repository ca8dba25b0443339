"""RemoteGenerator on two real llama-cpp-python servers with the test model; one of them
is killed (SIGKILL) in the middle of a job."""

from __future__ import annotations

import httpx
import pytest

from llamabatch import SamplingParams
from llamabatch.remote import RemoteGenerator
from llamabatch.testing.servers import LocalServer

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0)


def _direct(url: str, prompt: str, max_tokens: int) -> str:
    """The greedy reply of one server to a plain HTTP call (the reference)."""
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "top_k": 40,
        "top_p": 0.95,
        "min_p": 0.05,
        "repeat_penalty": 1.0,
    }
    answer = httpx.post(url + "/v1/completions", json=body, timeout=120).json()
    return answer["choices"][0]["text"]


def test_killing_one_of_two_servers_mid_job_completes_every_item_once_in_order(
    start_servers, model_path, tmp_path, request
):
    """b is SIGKILLed after 2 items, started again on its port after 8: every item is
    completed once, in order, each with its own greedy reply, and b is used again."""
    a, b = start_servers(2)
    prompts = [f"Item {i}: the colour of the sky on day {i} is" for i in range(30)]
    again = LocalServer(model_path, port=b.port, n_threads=1, log=tmp_path / "b-again.log")
    request.addfinalizer(again.stop)
    done, before = [], None
    with RemoteGenerator(
        [a.url, b.url],
        max_tokens=8,
        sampling=GREEDY,
        backoff_s=0.05,
        cooldown_s=0.2,
        max_cooldown_s=1.0,
        timeout_s=120,
    ) as gen:
        for group in gen.iter_groups(prompts):
            done.extend(group)
            if len(done) >= 2 and before is None:
                b.kill()
            if len(done) >= 8 and before is None:
                again.start(timeout_s=120)
                before = gen.stats.servers[b.url]
        stats = gen.stats
        b_is_up = gen.servers[1].is_up
    assert [c.index for c in done] == list(range(len(prompts)))
    assert all(c.ok and c.path == "remote" and c.n_tokens >= 1 for c in done), done
    assert stats.servers[b.url]["faults"] >= 1 and stats.retries >= 1
    after = stats.servers[b.url]
    assert b_is_up and (
        after["requests"] - before["requests"] > after["faults"] - before["faults"]
    )  # b answered again
    for c, prompt in zip(done, prompts):  # each reply is its own prompt's greedy reply
        assert c.text == _direct(a.url, prompt, 8), c


def test_messages_choices_and_usage_on_a_real_server(two_servers):
    urls = [s.url for s in two_servers]
    items = [
        [{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
        {"prompt": "Is fire cold? Answer:", "choices": ["yes", "no"]},
        {"prompt": "Count: 1, 2, 3,", "max_tokens": 3},
    ]
    with RemoteGenerator(urls, max_tokens=8, sampling=GREEDY) as gen:
        done = gen.complete_many(items)
    assert all(c.ok for c in done), done
    assert done[0].text and done[0].n_prompt_tokens > 5
    assert done[1].text in ("yes", "no")
    assert done[2].n_tokens <= 3 and done[2].finish_reason == "length"
