"""The `path` fixture: each code path of the vectorized kernel, forced on small inputs."""

import pytest
from kernel_cases import PATHS

from qkv_cli.core import vectorized as kernels


@pytest.fixture(params=list(PATHS))
def path(request, monkeypatch):
    for name, value in PATHS[request.param].items():
        monkeypatch.setattr(kernels, name, value)
    return request.param
