"""The pieces under a run's stop and its log lines, without a run: the signal handling of pacs_rl.stopping (a real
SIGTERM to this process) and PhaseLines' line for a quiet phase (its clock given)."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from pacs_rl import stopping
from pacs_rl.training.output import PhaseLines


def test_before_arming_a_signal_stops_at_once():
    with stopping.SignalStop() as stop, pytest.raises(stopping.StopRequested) as raised:
        assert not stop.armed
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs at the next bytecodes
            pass
    assert raised.value.signal_name == "SIGTERM"
    assert stopping.requested() is None  # leaving clears the request


def test_once_armed_the_first_signal_asks_the_next_check_and_the_second_stops_at_once():
    said = []
    before = signal.getsignal(signal.SIGTERM)
    with stopping.SignalStop(said.append) as stop:
        stop.arm()
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        assert said == ["Ctrl-C"] and stopping.requested() == "Ctrl-C"  # asked, nothing raised
        with pytest.raises(stopping.StopRequested, match="Ctrl-C"):
            stopping.check()
        model = torch.nn.Linear(2, 2)
        stopping.watch(model)
        with pytest.raises(stopping.StopRequested):
            model(torch.zeros(1, 2))  # a watched forward is a check point
        with pytest.raises(stopping.StopRequested):
            os.kill(os.getpid(), signal.SIGTERM)  # the second: at once
            for _ in range(1000):
                pass
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # a third would end the process
    assert signal.getsignal(signal.SIGTERM) == before and stopping.requested() is None
    stopping.check()  # nothing asked: no stop


def test_a_quiet_phase_gets_a_line_every_30_seconds(capsys):
    lines = PhaseLines(enabled=True, quiet=30)
    lines("step 3/24: sampling 8 prompts x 8 completions")
    t0 = lines._last[1]
    lines.tick(t0 + 29)  # not yet
    lines.tick(t0 + 30)
    lines.tick(t0 + 45)  # 15 s after the last line: not yet
    lines.tick(t0 + 61)
    out = [x[10:] for x in capsys.readouterr().out.splitlines()]
    assert out == [
        "step 3/24: sampling 8 prompts x 8 completions",
        "still going, 30 s since: step 3/24: sampling 8 prompts x 8 completions",
        "still going, 61 s since: step 3/24: sampling 8 prompts x 8 completions",
    ]
    PhaseLines(enabled=False)("nothing")  # a terminal: the bars say it
    assert capsys.readouterr().out == ""
