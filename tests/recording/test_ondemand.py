"""On-demand capture: armed by a signal or a request file, N steps into a
file ctl.load reads, nothing installed while idle, send_capture, disarm."""

import json
import os
import signal
import threading
import time

import pytest
import torch
import torch.optim.optimizer as optim

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.recording import ondemand
from cutimeline.timeline.schema import SpanKind

needs_sigusr2 = pytest.mark.skipif(not hasattr(signal, "SIGUSR2"),
                                   reason="the platform has no SIGUSR2")


@pytest.fixture(autouse=True)
def _disarmed():
    yield
    ondemand.disarm()
    assert ondemand._TRIGGER is None


def steps(n, modes=None):
    """``n`` SGD steps on a tiny model; the dispatch mode stack's depth at
    the start of each."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 4)
    for _ in range(n):
        if modes is not None:
            modes.append(torch._C._len_torch_dispatch_stack())
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


def step_numbers(tl):
    s = tl.spans
    return sorted(s.number[s.kind == SpanKind.STEP].tolist())


@needs_sigusr2
def test_signal_captures_the_next_n_steps(tmp_path):
    out = tmp_path / "cap.ctl"
    trigger = ctl.arm(steps=3, path=out, options={"device": "cpu", "measure": False})
    modes = []
    steps(2, modes)                        # idle: steps 0, 1
    os.kill(os.getpid(), signal.SIGUSR2)   # the handler only sets a flag
    steps(6, modes)                        # step 2 ends: capture steps 3, 4, 5
    assert modes == [0, 0, 0, 1, 1, 1, 0, 0]
    assert trigger.captures == [str(out)]
    tl = ctl.load(out)
    assert tl.meta["steps"] == [3, 5] and step_numbers(tl) == [3, 4, 5]
    assert tl.meta["capture"]["requested_steps"] == 3 and len(tl.ops) > 0


def test_request_file_without_signal(tmp_path):
    trigger = ctl.arm(steps=1, signal=None, options={"device": "cpu", "measure": False},
                      out_dir=tmp_path)
    marker = json.load(open(trigger.marker))
    assert {k: marker[k] for k in ("pid", "signal", "out_dir", "armed")} == \
        {"pid": os.getpid(), "signal": None, "out_dir": str(tmp_path), "armed": True}
    out = tmp_path / "asked.ctl"
    with open(trigger.request, "w") as f:
        json.dump({"steps": 2, "out": str(out)}, f)
    steps(1)                    # boundary 1 reads it: steps 1, 2
    assert not os.path.exists(trigger.request)
    steps(3)
    assert ctl.load(out).meta["steps"] == [1, 2]
    # a touched (empty) file: the armed defaults, written to out_dir/cutimeline-<pid>-...
    open(trigger.request, "w").close()
    steps(3)
    (made,) = [p for p in os.listdir(tmp_path) if p.startswith(f"cutimeline-{os.getpid()}-")]
    assert trigger.captures[-1] == str(tmp_path / made)
    assert step_numbers(ctl.load(tmp_path / made)) == [5]


def test_send_capture_to_own_pid_and_rearm(tmp_path):
    trigger = ctl.arm(steps=1, signal=None, rearm=False,
                      options={"device": "cpu", "measure": False}, out_dir=tmp_path)
    path = ondemand.send_capture(os.getpid(), steps=2, out=tmp_path / "a.ctl")
    assert path == str(tmp_path / "a.ctl") and not os.path.exists(path)
    modes = []
    steps(4, modes)
    assert modes == [0, 1, 1, 0] and trigger.captures == [path]
    assert ctl.load(path).meta["steps"] == [1, 2]
    # rearm=False: disarmed after the capture
    assert not trigger.armed and ondemand._TRIGGER is None
    assert not os.path.exists(trigger.marker)
    with pytest.raises(CutimelineError, match="not armed for capture"):
        ondemand.send_capture(os.getpid(), steps=1, out=tmp_path / "b.ctl")


@needs_sigusr2
def test_send_capture_waits_for_the_file(tmp_path):
    ctl.arm(steps=1, options={"device": "cpu", "measure": False}, out_dir=tmp_path)
    done = threading.Event()

    def train():  # steps end on another thread while this one waits
        while not done.is_set():
            steps(1)

    worker = threading.Thread(target=train)
    worker.start()
    try:
        path = ondemand.send_capture(os.getpid(), steps=2, out=tmp_path / "w.ctl", timeout=20)
    finally:
        done.set()
        worker.join()
    tl = ctl.load(path)
    a, b = tl.meta["steps"]
    assert b == a + 1 and step_numbers(tl) == [a, b]


def test_send_capture_times_out_and_checks_out(tmp_path):
    ctl.arm(steps=1, signal=None, options={"device": "cpu", "measure": False},
            out_dir=tmp_path)
    with pytest.raises(CutimelineError, match="did not write"):
        ondemand.send_capture(os.getpid(), steps=1, out=tmp_path / "t.ctl", timeout=0.05)
    (tmp_path / "exists.ctl").write_text("x")
    with pytest.raises(CutimelineError, match="exists already"):
        ondemand.send_capture(os.getpid(), out=tmp_path / "exists.ctl")
    with pytest.raises(CutimelineError, match="must be a process id"):
        ondemand.send_capture(0)


@needs_sigusr2
def test_disarm_restores_everything():
    before = signal.getsignal(signal.SIGUSR2)
    post = len(optim._global_optimizer_post_hooks)
    trigger = ctl.arm(options={"device": "cpu"})
    assert signal.getsignal(signal.SIGUSR2) == trigger._on_signal
    assert len(optim._global_optimizer_post_hooks) == post + 1
    with pytest.raises(CutimelineError, match="already armed"):
        ctl.arm()
    ondemand.disarm()
    assert signal.getsignal(signal.SIGUSR2) == before
    assert len(optim._global_optimizer_post_hooks) == post
    assert not os.path.exists(trigger.marker) and not trigger.armed
    ondemand.disarm()  # twice: nothing to do


def test_a_capture_that_cannot_be_written_warns_and_training_goes_on(tmp_path):
    (tmp_path / "file").write_text("")
    trigger = ctl.arm(steps=1, path=tmp_path / "file" / "x.ctl", signal=None,
                      options={"device": "cpu", "measure": False})
    open(trigger.request, "w").close()
    with pytest.warns(RuntimeWarning, match="could not write the capture"):
        steps(3)
    assert trigger.captures == [] and trigger.armed  # armed again for the next request


def test_disarm_mid_capture_writes_what_it_holds(tmp_path):
    out = tmp_path / "mid.ctl"
    trigger = ctl.arm(steps=5, path=out, signal=None,
                      options={"device": "cpu", "measure": False})
    open(trigger.request, "w").close()
    steps(3)              # boundary 1 starts it: steps 1, 2 recorded
    ondemand.disarm()
    assert ctl.load(out).meta["steps"][0] == 1 and step_numbers(ctl.load(out)) == [1, 2]
    assert torch._C._len_torch_dispatch_stack() == 0


def test_manual_steps_and_bad_requests(tmp_path):
    trigger = ctl.arm(steps=2, path=tmp_path / "m.ctl", signal=None,
                      options={"device": "cpu", "measure": False, "steps": "manual"})
    with open(trigger.request, "w") as f:
        f.write("[1, 2]")
    with pytest.warns(RuntimeWarning, match="ignores the capture request"):
        trigger.step()
    assert trigger._window is None
    open(trigger.request, "w").close()
    trigger.step()        # boundary 2: capture steps 2, 3
    for _ in range(2):
        torch.ones(2).add(1)
        trigger.step()
    assert step_numbers(ctl.load(tmp_path / "m.ctl")) == [2, 3]


@pytest.mark.parametrize("kwargs, match", [
    (dict(steps=0), r"arm\(steps=0\) must be"),
    (dict(path=""), "must name a file"),
    (dict(signal=-5), "not a signal of this platform"),
    (dict(rearm=1), "True or False"),
    (dict(options={"colour": 1}), "does not take"),
    (dict(options={"schedule": ctl.schedule()}), "not schedule"),
    (dict(options={"device": "tpu"}), "device"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(CutimelineError, match=match):
        ctl.arm(**kwargs)
    assert ondemand._TRIGGER is None


def test_signal_needs_the_main_thread():
    caught = []

    def other():
        try:
            ctl.arm(signal=getattr(signal, "SIGUSR2", signal.SIGTERM))
        except CutimelineError as exc:
            caught.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert caught and "main thread" in str(caught[0])


# -- one request, one capture (issue 45) -------------------------------------------------

@needs_sigusr2
def test_a_request_taken_before_its_signal_is_one_capture(tmp_path, monkeypatch):
    """The job takes the request file at a step boundary before the signal
    that comes with it arrives: that signal is the request's, and starts no
    second capture (it did: 30 requests made 31 captures)."""
    trigger = ctl.arm(steps=1, options={"device": "cpu", "measure": False},
                      out_dir=tmp_path)
    kill = os.kill

    def late_kill(pid, signum):  # the job reaches a step boundary first
        steps(1)
        assert trigger._window is not None  # the request was taken: capturing
        kill(pid, signum)

    monkeypatch.setattr(os, "kill", late_kill)
    asked = []
    for i in range(3):
        asked.append(ondemand.send_capture(os.getpid(), steps=1, out=tmp_path / f"{i}.ctl"))
        steps(4)  # the capture ends; then the signal, handled late, is matched
    assert trigger.captures == asked
    assert sorted(os.listdir(tmp_path)) == ["0.ctl", "1.ctl", "2.ctl"]


@needs_sigusr2
def test_each_request_is_one_capture_in_whatever_order_it_arrives(tmp_path):
    """A bare signal, a touched file, a file and then its signal, a signal
    and then its file: four requests, four captures."""
    trigger = ctl.arm(steps=1, options={"device": "cpu", "measure": False},
                      out_dir=tmp_path)
    me = os.getpid()
    os.kill(me, signal.SIGUSR2)                       # 1: the armed defaults
    steps(3)
    open(trigger.request, "w").close()                # 2: the armed defaults
    steps(3)
    with open(trigger.request, "w") as f:             # 3: file, taken, then its signal
        json.dump({"out": "c.ctl", "signalled": True}, f)
    steps(1)
    os.kill(me, signal.SIGUSR2)
    steps(3)
    os.kill(me, signal.SIGUSR2)                       # 4: its signal, then the file
    with open(trigger.request, "w") as f:
        json.dump({"out": "d.ctl", "signalled": True}, f)
    steps(5)
    assert len(trigger.captures) == 4 and len(os.listdir(tmp_path)) == 4
    assert trigger.captures[2:] == [str(tmp_path / "c.ctl"), str(tmp_path / "d.ctl")]
    assert not trigger._signals and trigger._owed == 0


@needs_sigusr2
def test_n_requests_from_another_thread_make_n_captures(tmp_path):
    """Requests sent while the job steps on another thread (the signal
    lands on the main thread, the file is read on the training thread, in
    either order): as many captures as requests, no more."""
    trigger = ctl.arm(steps=1, options={"device": "cpu", "measure": False},
                      out_dir=tmp_path)
    done = threading.Event()

    def train():
        while not done.is_set():
            steps(1)

    worker = threading.Thread(target=train)
    worker.start()
    try:
        asked = [ondemand.send_capture(os.getpid(), steps=1, out=tmp_path / f"{i}.ctl",
                                       timeout=30) for i in range(8)]
        time.sleep(0.3)  # time for a leftover signal to start a capture of its own
    finally:
        done.set()
        worker.join()
    steps(4)
    assert trigger.captures == asked and len(os.listdir(tmp_path)) == 8
