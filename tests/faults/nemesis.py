"""A nemesis: faults applied on a schedule drawn from a seed, one at a time, each healed before the next, and every
fault healed when it stops. The seed is printed at the start so a failing run's schedule can be replayed
(STRATA_NEMESIS_SEED); timing on a loaded machine still varies, so a replay runs the same faults, not the same
interleaving.

A fault kind is any callable `target -> Fault` (apply and heal callables): `broker_faults(cluster)` gives kill -9 +
restart and SIGSTOP/SIGCONT of a broker; network cuts can join later as more kinds without touching the runner."""
from __future__ import annotations

import random
import signal
import threading
import traceback
from dataclasses import dataclass
from typing import Callable, Iterator


@dataclass(frozen=True)
class Fault:
    apply: Callable[[], None]
    heal: Callable[[], None]


@dataclass(frozen=True)
class Step:
    quiet: float        # seconds without a fault before this one
    kind: str
    target: int
    length: float       # seconds the fault lasts before it is healed


def steps(seed: int, kinds: dict[str, float], targets: list[int], quiet: tuple[float, float] = (2.0, 5.0),
          length: tuple[float, float] = (1.0, 6.0)) -> Iterator[Step]:
    """The endless schedule of `seed`: kinds drawn by weight, targets and times uniformly. The same seed always
    gives the same steps, however long the run."""
    rng = random.Random(seed)
    names = sorted(kinds)
    weights = [kinds[k] for k in names]
    while True:
        yield Step(round(rng.uniform(*quiet), 2), rng.choices(names, weights)[0], rng.choice(sorted(targets)),
                   round(rng.uniform(*length), 2))


def broker_faults(cluster) -> dict[str, Callable[[int], Fault]]:
    """kill: SIGKILL, then a restart on the same data dir. pause: SIGSTOP, then SIGCONT (longer than
    broker.session.timeout.ms, the broker is fenced and its partitions move; it must notice when it wakes)."""
    def kill(i: int) -> Fault:
        b = cluster.brokers[i]
        return Fault(apply=b.kill9, heal=lambda: b.start(timeout=60))

    def pause(i: int) -> Fault:
        b = cluster.brokers[i]
        return Fault(apply=lambda: b.proc.send_signal(signal.SIGSTOP), heal=lambda: b.proc.send_signal(signal.SIGCONT))
    return {"kill": kill, "pause": pause}


class Nemesis:
    """Runs `steps(seed, ...)` in a thread against `faults` (kind -> callable target -> Fault), recording each
    fault and heal in the history as process "nemesis". After each heal, `settle()` (e.g. wait for a full ISR) lets
    the cluster recover before the next fault; a settle that fails is recorded (info) and the run goes on. A heal
    that fails (a broker that does not come back) ends the schedule and is raised by raise_errors()."""

    def __init__(self, faults: dict[str, Callable[[int], Fault]], targets: list[int], seed: int | None = None,
                 kinds: dict[str, float] | None = None, quiet: tuple[float, float] = (2.0, 5.0),
                 length: tuple[float, float] = (1.0, 6.0), settle: Callable[[], None] | None = None):
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**32)
        print(f"nemesis seed={self.seed} (replay with STRATA_NEMESIS_SEED={self.seed})", flush=True)
        self.faults, self.settle = faults, settle
        self._steps = steps(self.seed, kinds or {k: 1.0 for k in faults}, targets, quiet, length)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []
        self.done: list[Step] = []

    def start(self, history) -> None:
        self.history = history
        history.info("nemesis", "seed", seed=self.seed)
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after healing the fault in progress (waits for it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def raise_errors(self) -> None:
        if self.errors:
            raise RuntimeError(f"nemesis (seed {self.seed}) failed: {self.errors[0]!r}") from self.errors[0]

    def _run(self) -> None:
        h = self.history
        for step in self._steps:
            if self._stop.wait(step.quiet):
                return
            fault = self.faults[step.kind](step.target)
            h.invoke("nemesis", step.kind, target=step.target, length=step.length)
            try:
                fault.apply()
            except Exception as e:          # noqa: BLE001 - a fault that cannot be applied is noted, not fatal
                h.info("nemesis", step.kind, target=step.target, error=repr(e))
                continue
            h.ok("nemesis", step.kind, target=step.target)
            self.done.append(step)
            self._stop.wait(step.length)
            h.invoke("nemesis", "heal", fault=step.kind, target=step.target)
            try:
                fault.heal()
            except Exception as e:          # noqa: BLE001 - raised by raise_errors() in the test's thread
                h.info("nemesis", "heal", fault=step.kind, target=step.target, error=repr(e))
                self.errors.append(e)
                return
            h.ok("nemesis", "heal", fault=step.kind, target=step.target)
            if self.settle is not None:
                try:
                    self.settle()
                except Exception as e:      # noqa: BLE001 - slow recovery is worth a note, not a stop
                    h.info("nemesis", "settle", error="".join(traceback.format_exception_only(e)).strip()[:500])
