"""hooks/installer.py: late hooks (torch.compile's) are retried at step boundaries
until they are installed. The CUDA calls it has wrapped are in
test_cuda.py."""


def test_boundary_retries_late_hooks_until_they_are_done():
    from cutimeline.recording.session import Session
    s = Session(None, max_ops=10, steps="auto")
    calls = []
    s.at_boundary.append(lambda: calls.append(1) or len(calls) == 2)
    for _ in range(3):
        s.boundary(s.writer(), manual=True)
    assert calls == [1, 1] and s.at_boundary == []
