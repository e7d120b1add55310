"""``server.slots.Slots``: the process's request slots, and each tenant's share."""

from __future__ import annotations

import pytest

from ctxwindow.server import Settings
from ctxwindow.server.errors import APIError
from ctxwindow.server.slots import Slots


def test_a_tenant_takes_its_share_and_no_more_and_the_process_its_total() -> None:
    slots = Slots(total=3, per_tenant=2)
    first, _ = slots.take("alice"), slots.take("alice")
    with pytest.raises(APIError) as refused:
        slots.take("alice")
    assert refused.value.status == 429 and refused.value.code == "upstream_busy"
    assert refused.value.headers == {"Retry-After": "1"}
    slots.take("bob")
    with pytest.raises(APIError, match="its limit"):
        slots.take("carol")
    first()
    first()  # given back once, however often it is called
    assert slots.busy == 2 and slots.held == {"alice": 1, "bob": 1}
    slots.take("carol")
    assert slots.refused == {"tenant": 1, "process": 1}


@pytest.mark.parametrize(
    ("keys", "per_tenant", "expected"),
    [({}, None, 100), ({"k1": "a", "k2": "a"}, None, 100), ({"k1": "a", "k2": "b"}, None, 50),
     ({"k1": "a", "k2": "b"}, 7, 7), ({}, 500, 100)],
)  # fmt: skip
def test_the_share_of_a_tenant_defaults_to_all_with_one_tenant_else_half(
    keys: dict[str, str], per_tenant: int | None, expected: int
) -> None:
    settings = Settings(store="memory://", api_keys=keys, max_upstream_calls_per_tenant=per_tenant)
    assert settings.upstream_calls_per_tenant() == expected


def test_a_share_beyond_the_total_is_refused() -> None:
    with pytest.raises(ValueError, match="per_tenant"):
        Slots(total=2, per_tenant=3)
