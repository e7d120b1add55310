"""The framework extras are version ranges, and tools/check_adapter_ranges.py (run by
``make test``) installs both ends of each from them: pyproject.toml is the one source."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).parent.parent


def _tool() -> ModuleType:
    path = ROOT / "tools" / "check_adapter_ranges.py"
    spec = importlib.util.spec_from_file_location("check_adapter_ranges", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


TOOL = _tool()
EXTRAS: dict[str, list[str]] = TOOL.extras()


@pytest.mark.parametrize("extra", sorted(TOOL.ADAPTERS))
def test_each_framework_is_a_range_with_both_bounds(extra: str) -> None:
    """Not a pin: a lower bound (the lowest version tested) and an upper one."""
    for requirement in EXTRAS[extra]:
        operators = sorted(spec.operator for spec in Requirement(requirement).specifier)
        assert operators == ["<", ">="], requirement


@pytest.mark.parametrize("extra", sorted(TOOL.ADAPTERS))
def test_the_ends_install_the_extra_with_and_without_the_lower_bounds(extra: str) -> None:
    lowest, newest = TOOL.ends(extra, EXTRAS)
    assert newest.requirements[:2] == (
        "-e",
        f"{ROOT}[{','.join((extra, *TOOL.ADAPTERS[extra][1]))}]",
    )
    pins = lowest.requirements[len(newest.requirements) :]
    assert lowest.requirements[: len(newest.requirements)] == newest.requirements
    for requirement, pin in zip(EXTRAS[extra], pins, strict=True):
        parsed = Requirement(requirement)
        low = next(s.version for s in parsed.specifier if s.operator == ">=")
        assert pin == f"{parsed.name}=={low}"
    assert {Requirement(r).name for r in newest.requirements[2:]} == {"pytest", "hypothesis"}
    assert Path(ROOT / lowest.test_file).is_file()


@pytest.mark.parametrize("requirement", ["langchain-core==1.8.3", "langchain-core<2"])
def test_a_requirement_without_one_lower_bound_is_refused(requirement: str) -> None:
    with pytest.raises(SystemExit, match="needs one lower bound"):
        TOOL.lower_bound(requirement)


def test_the_suite_runs_the_frameworks_at_versions_in_their_ranges() -> None:
    """The test extra brings the adapter extras: the suite's own frameworks are in range,
    and no other extra names a framework with bounds of its own."""
    for extra in TOOL.ADAPTERS:
        for requirement in map(Requirement, EXTRAS[extra]):
            assert requirement.specifier.contains(importlib.metadata.version(requirement.name))
    frameworks = {Requirement(r).name for extra in TOOL.ADAPTERS for r in EXTRAS[extra]}
    for extra, requirements in EXTRAS.items():
        if extra not in TOOL.ADAPTERS:
            assert not frameworks & {Requirement(r).name for r in requirements}, extra
