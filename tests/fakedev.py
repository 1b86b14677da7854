"""A fake device for tests of the staged path (interlink.devices) without a GPU.

FakeDeviceArray keeps its data in a private numpy array and exposes no buffer protocol, so the
runtime can only reach it through a device adapter: download (device -> host) and upload (host ->
device) are counted, which the tests check.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class FakeDeviceArray:
    def __init__(self, data: Any, contiguous: bool = True) -> None:
        self._data = np.array(data, copy=True)
        self._contiguous = contiguous
        self.device = "fake:0"
        self.downloads = 0
        self.uploads = 0

    @property
    def shape(self) -> tuple:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    def numpy(self) -> np.ndarray:  # "copy to host" for the test's own checks
        return self._data.copy()


class _Staged:
    """Host copies come from interlink.devices' pool, as the torch and CuPy adapters' do, so a Staged
    dropped before its call is done (its buffer handed to the next argument) shows up here too."""

    def __init__(self, x: FakeDeviceArray) -> None:
        from interlink import devices

        self.x = x
        self.device = x.device
        self.key = ("fake", x._data.dtype.str, x._data.size)
        self.host = devices._pooled(self.key, lambda: np.empty(x._data.size, dtype=x._data.dtype))

    def __del__(self) -> None:
        try:
            from interlink import devices

            devices._give_back(self.key, self.host)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def download(self) -> None:
        self.x.downloads += 1
        self.host[...] = self.x._data.reshape(-1)

    def upload(self) -> None:
        self.x.uploads += 1
        self.x._data.reshape(-1)[...] = self.host


class FakeAdapter:
    name = "fake"

    def accepts(self, x: Any) -> bool:
        return isinstance(x, FakeDeviceArray)

    def stage(self, x: FakeDeviceArray, name: str, writable: bool) -> _Staged:
        if not x._contiguous:
            raise ValueError(f"{name} must be contiguous (fake device)")
        return _Staged(x)


ADAPTER = FakeAdapter()


def install() -> None:
    from interlink import devices

    devices.register_adapter(ADAPTER)
