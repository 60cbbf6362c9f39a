"""The infra scripts under test, loaded by path (see :mod:`support.infra_scripts`)."""

from __future__ import annotations

from types import ModuleType

import pytest

from support.infra_scripts import load_script


@pytest.fixture(scope="module")
def compact_job() -> ModuleType:
    return load_script("compact_job", "emr")


@pytest.fixture(scope="module")
def build_environment() -> ModuleType:
    return load_script("build_environment", "emr")


@pytest.fixture(scope="module")
def build_layer() -> ModuleType:
    return load_script("build_layer", "lambda")


@pytest.fixture(scope="module")
def package_report() -> ModuleType:
    return load_script("package_report", "lambda")


@pytest.fixture(scope="module")
def query_job() -> ModuleType:
    return load_script("query_job", "emr")
