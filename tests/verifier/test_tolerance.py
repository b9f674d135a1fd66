"""The judge's comparison (tolerance.py) and wire format (channel.py); its inputs: test_inputs.py."""

from __future__ import annotations

import socket
import threading

import pytest

torch = pytest.importorskip("torch")

from cudice.verifier import channel  # noqa: E402
from cudice.verifier.tolerance import compare_outputs  # noqa: E402


def test_tiny_garbage_fails_where_an_absolute_atol_accepted_it() -> None:
    x = torch.randn(8, 65536)
    ref = torch.softmax(x, dim=1)  # every value ~1.5e-5
    assert torch.allclose(x * 1e-6, ref, atol=1e-2, rtol=1e-2)  # what the old absolute check accepted
    cmp = compare_outputs(ref, x * 1e-6, 1e-2, 1e-2)
    assert not cmp.ok and "rms" in cmp.why


def test_honest_rounding_passes_in_every_dtype() -> None:
    a, b = torch.randn(256, 256, dtype=torch.float64), torch.randn(256, 256, dtype=torch.float64)
    exact = a @ b
    fp32 = (a.float() @ b.float()).double()  # another summation order and precision
    assert compare_outputs(exact.float(), fp32.float(), 1e-2, 1e-2).ok
    assert compare_outputs(
        exact.bfloat16(), (a.bfloat16().float() @ b.bfloat16().float()).bfloat16(), 1e-2, 1e-2
    ).ok


def test_a_small_bias_on_every_element_fails_the_norm_check() -> None:
    ref = torch.randn(4096).abs() + 1.0
    biased = ref * (1 + 0.9e-2)  # each element inside rtol=1e-2, the whole output 0.9% off
    cmp = compare_outputs(ref, biased, 1e-2, 1e-2)
    assert not cmp.ok and "relative norm" in cmp.why
    assert compare_outputs(ref, ref * (1 + 1e-4), 1e-2, 1e-2).ok


@pytest.mark.parametrize(
    ("cand", "needle"),
    [
        (lambda r: r[:-1], "shape"),
        (lambda r: r.double(), "dtype"),
        (lambda r: r + 1.0, "differs"),
        (lambda r: torch.where(r > 0, torch.full_like(r, float("inf")), r), "NaN/Inf"),
        (lambda r: (r, r), "outputs"),
    ],
)
def test_mismatches_are_named(cand: object, needle: str) -> None:
    ref = torch.randn(16, 8)
    cmp = compare_outputs(ref, cand(ref), 1e-2, 1e-2)  # type: ignore[operator]
    assert not cmp.ok and needle in cmp.why


def test_integer_outputs_must_be_equal() -> None:
    ref = torch.arange(10)
    assert compare_outputs(ref, ref.clone(), 1e-2, 1e-2).ok
    assert not compare_outputs(ref, ref + (ref == 3), 1e-2, 1e-2).ok


def test_channel_round_trip_and_bounds() -> None:
    a, b = socket.socketpair()
    value = (torch.randn(3, 4), [torch.arange(5), {"k": torch.ones(2, dtype=torch.bfloat16)}], 7, None, "s")
    tree, blobs = channel.encode(value)
    sender = threading.Thread(target=channel.send, args=(a, {"outputs": tree}, blobs))
    sender.start()
    header, got = channel.recv(b, 1 << 20)
    sender.join()
    back = channel.decode(header["outputs"], got)
    assert torch.equal(back[0], value[0]) and torch.equal(back[1][0], value[1][0])
    assert back[1][1]["k"].dtype == torch.bfloat16 and back[2:] == (7, None, "s")
    sender = threading.Thread(target=channel.send, args=(a, {"outputs": tree}, blobs))
    sender.start()
    with pytest.raises(channel.ChannelError, match="more than"):
        channel.recv(b, 8)  # a reply bigger than the judge allows is refused before it is read
    sender.join()
    with pytest.raises(channel.ChannelError, match="malformed"):
        channel.decode({"__t__": 0, "dtype": "object", "shape": [1]}, [bytearray(8)])
    a.close()
    b.close()
