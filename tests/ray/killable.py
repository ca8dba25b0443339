"""A BatchCompleter whose actor is killed with ``ray.kill`` in the middle of its first
batch, once per job (a named actor keeps the count). Pickled by value, so the actors
need not import this file."""

from __future__ import annotations

import time

import ray

from llamabatch.ray import BatchCompleter

SWITCH = "llamabatch-test-kill-switch"


@ray.remote(num_cpus=0)
class KillSwitch:
    """Kills the first actor that asks, with ``ray.kill`` (restart allowed)."""

    def __init__(self) -> None:
        self.killed = 0

    def kill(self, handle) -> bool:
        if self.killed:
            return False
        self.killed += 1
        ray.kill(handle, no_restart=False)
        return True

    def count(self) -> int:
        return self.killed


class KilledOnce(BatchCompleter):
    def __call__(self, batch):
        switch = ray.get_actor(SWITCH)
        if ray.get(switch.count.remote()) == 0:
            switch.kill.remote(ray.get_runtime_context().current_actor)
            time.sleep(60)  # killed meanwhile; the batch is retried on the restarted actor
        return super().__call__(batch)
