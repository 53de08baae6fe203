"""The cuda backend's stream switching, on a CPU: torch.cuda replaced by a fake that counts.

The fake keeps torch's "current stream" per thread (as torch does) and counts every
``torch.cuda.stream(s)`` enter and every ``torch.cuda.set_stream``. What it proves: a launch on
the thread's current stream enters no stream context (the switch is paid once, when the stream is
made current), and a launch on another stream still runs its kernel with that stream current.
The same properties on a real GPU: tests/streams/test_streams_cuda.py (cuda-marked).
"""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch

from dbo.registry import use_ubatch
from dbo.streams import set_stream, use_stream
from dbo.streams.cuda import CudaBackend
from dbo.trace import Tracer
from tests.support.timing import slack


class FakeTorchStream:
    _next = [0x1000]

    def __init__(self, device=None, name: str = ""):
        self.device = device
        self.name = name
        FakeTorchStream._next[0] += 0x10
        self.cuda_stream = FakeTorchStream._next[0]
        self.waits: list = []

    def wait_event(self, ev) -> None:
        self.waits.append(ev)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class FakeEvent:
    def __init__(self, enable_timing: bool = False):
        self.stream = None

    def record(self, stream=None) -> None:
        self.stream = stream

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other) -> float:
        return 1.0


class FakeCuda:
    """What the cuda backend uses of torch.cuda, with torch's per-thread current stream."""

    def __init__(self):
        self.default = FakeTorchStream(name="default")
        self.local = threading.local()
        self.enters = 0
        self.set_streams = 0
        self.kernel_streams: list = []  # torch's current stream whenever a fake kernel ran

    def current(self) -> FakeTorchStream:
        return getattr(self.local, "stream", self.default)

    def set_stream(self, s) -> None:
        self.set_streams += 1
        self.local.stream = s

    @contextlib.contextmanager
    def stream(self, s):
        self.enters += 1
        prev = self.current()
        self.local.stream = s
        try:
            yield
        finally:
            self.local.stream = prev

    def kernel(self, *args) -> None:
        self.kernel_streams.append(self.current())

    def install(self, mp: pytest.MonkeyPatch) -> None:
        c = torch.cuda
        mp.setattr(c, "is_available", lambda: True)
        mp.setattr(c, "current_device", lambda: 0)
        mp.setattr(c, "Stream", FakeTorchStream)
        mp.setattr(c, "Event", FakeEvent)
        mp.setattr(c, "device", lambda d: contextlib.nullcontext())
        mp.setattr(c, "current_stream", lambda device=None: self.current())
        mp.setattr(c, "default_stream", lambda device=None: self.default)
        mp.setattr(c, "set_stream", self.set_stream)
        mp.setattr(c, "stream", self.stream)
        mp.setattr(c, "_sleep", lambda cycles: self.kernel())
        mp.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
        mp.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: self.current().cuda_stream, raising=False)


@pytest.fixture
def fake(monkeypatch):
    f = FakeCuda()
    f.install(monkeypatch)
    return f


@pytest.fixture
def cb(fake):
    b = CudaBackend(device="cuda:0", timeout=slack(5))
    fake.kernel_streams.clear()  # the spin calibration's kernels
    fake.enters = fake.set_streams = 0
    try:
        yield b
    finally:
        b.close()
        set_stream(None)


def test_a_launch_on_the_current_stream_enters_no_stream_context(fake, cb):
    s = cb.new_stream("s")
    fake.enters = fake.set_streams = 0
    with use_stream(s):
        for _ in range(10):
            s.launch(fake.kernel)
    assert fake.enters == 0, "a launch on the current stream entered torch.cuda.stream: the switch is paid per launch"
    assert fake.set_streams == 2  # made current once, back to the default once
    assert fake.kernel_streams == [s.torch_stream] * 10
    assert fake.current() is fake.default


def test_dbo_launch_on_the_current_stream_also_skips_the_context(fake, cb):
    from dbo.streams import launch

    s = cb.new_stream("s")
    fake.enters = 0
    set_stream(s)
    try:
        for _ in range(5):
            launch(fake.kernel)
    finally:
        set_stream(None)
    assert fake.enters == 0 and fake.kernel_streams == [s.torch_stream] * 5


def test_a_launch_on_another_stream_runs_there_and_restores_the_current_one(fake, cb):
    s, other = cb.new_stream("s"), cb.new_stream("other")
    fake.enters = 0
    with use_stream(s):
        other.launch(fake.kernel)
        other.launch(fake.kernel)
        assert fake.current() is s.torch_stream  # the temporary switch is undone
        s.launch(fake.kernel)
    assert fake.kernel_streams == [other.torch_stream, other.torch_stream, s.torch_stream]
    assert fake.enters == 2  # one per launch on the stream that is not current, none for s


def test_a_launch_with_no_current_stream_switches_temporarily(fake, cb):
    s = cb.new_stream("s")
    fake.enters = 0
    s.launch(fake.kernel)
    assert fake.kernel_streams == [s.torch_stream] and fake.enters == 1
    assert fake.current() is fake.default


def test_torch_stream_changed_behind_dbos_back_is_noticed(fake, cb):
    """A `with torch.cuda.stream(x)` inside a region where s is current: launches on s still go to s."""
    s = cb.new_stream("s")
    elsewhere = FakeTorchStream(name="elsewhere")
    with use_stream(s):
        with fake.stream(elsewhere):
            s.launch(fake.kernel)
    assert fake.kernel_streams == [s.torch_stream]


def test_per_thread_current_streams(fake, cb):
    """Each thread's current stream is its own: two threads, each launching on the stream it made current."""
    a, b = cb.new_stream("a"), cb.new_stream("b")
    seen: dict[str, list] = {}
    errors: list[BaseException] = []

    def body(stream, key):
        try:
            with use_stream(stream):
                mine = []
                for _ in range(20):
                    stream.launch(lambda: mine.append(fake.current()))
                seen[key] = mine
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    fake.enters = 0
    ts = [threading.Thread(target=body, args=(a, "a")), threading.Thread(target=body, args=(b, "b"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(slack(10))
    assert not errors and not any(t.is_alive() for t in ts)
    assert seen["a"] == [a.torch_stream] * 20 and seen["b"] == [b.torch_stream] * 20
    assert fake.enters == 0


def test_modelled_comm_and_tracing_keep_working(fake, cb):
    tr = Tracer()
    cb.tracer = tr
    s = cb.new_stream("comm0")
    with use_stream(s), use_ubatch(1):
        s.launch(None, name="xfer", kind="comm", cost=1e-3)  # modelled: a spin (the fake kernel)
        s.launch(fake.kernel, name="k")
    cb.synchronize()
    assert fake.kernel_streams == [s.torch_stream, s.torch_stream]
    assert [(k.name, k.stream, k.ubatch) for k in tr.records] == [("xfer", "comm0", 1), ("k", "comm0", 1)]


def test_every_launch_keyword_reaches_the_cuda_stream(fake, cb):
    """Each of launch's keywords (``KernelSpec``; tests/streams/test_launch_keywords.py) lands where
    the cuda stream uses it: the cost as a spin before a comm kernel, the rest on its record."""
    tr = cb.tracer = Tracer()
    s = cb.new_stream("s")
    with use_stream(s):
        s.launch(fake.kernel, name="k0", kind="comm", cost=1e-6, op="x_op", layer=7)
    cb.synchronize()
    assert fake.kernel_streams == [s.torch_stream, s.torch_stream]  # the spin, then the kernel
    assert [(k.name, k.kind, k.op, k.layer) for k in tr.records] == [("k0", "comm", "x_op", 7)]


def test_a_raising_kernel_fails_the_stream_and_restores_torchs_stream(fake, cb):
    s = cb.new_stream("s")

    def bad():
        raise ValueError("boom")

    s.launch(bad, name="bad")  # not current: under the temporary switch
    assert fake.current() is fake.default
    assert isinstance(s.error, ValueError)


def test_the_benchs_before_path_enters_a_context_per_launch_and_is_undone(fake, cb):
    """The bench's A/B row (demos.bench._host) forces the old path for one step, then restores the new."""
    from demos.bench._host import _with_context_per_launch

    s = cb.new_stream("s")

    def step(n, _):
        for _ in range(n):
            s.launch(fake.kernel)

    with use_stream(s):
        _with_context_per_launch(lambda f, i: f(i, None), step, 4)
        assert fake.enters == 4
        step(4, None)
        assert fake.enters == 4  # restored: no more enters
    assert fake.kernel_streams == [s.torch_stream] * 8
