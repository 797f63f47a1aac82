"""ListRuns filters (the AIP-160 subset), page sizes and tokens (AIP-158), resource names and
request ids: accepted forms, and INVALID_ARGUMENT naming the field for the others."""

from __future__ import annotations

import uuid

import pytest

from libs.errors import InvalidArgument
from services.orchestrator.runs import paging
from services.orchestrator.runs.model import RunState

BATCH = f"batches/{uuid.uuid4()}"


@pytest.mark.parametrize(("text", "state", "batch"), [
    ("", None, None),
    ("   ", None, None),
    ("state = RUNNING", RunState.RUNNING, None),
    ("state=STATE_QUEUED", RunState.QUEUED, None),
    ('state = "succeeded"', RunState.SUCCEEDED, None),
    (f'batch = "{BATCH}"', None, BATCH),
    (f'state = FAILED AND batch = "{BATCH}"', RunState.FAILED, BATCH),
    (f"batch = {BATCH} AND state = CANCELLED", RunState.CANCELLED, BATCH),
])
def test_filters_in_the_subset_parse(text, state, batch):
    assert paging.parse_run_filter(text) == paging.RunFilter(state=state, batch=batch)


@pytest.mark.parametrize(("text", "words"), [
    ("state = SLEEPING", "unknown state"),
    ("owner = someone", "unknown field"),
    ("state = RUNNING AND state = QUEUED", "twice"),
    ('batch = "batches/not-a-uuid"', "batch"),
    ("state RUNNING", "field = value"),
    ("state = RUNNING OR state = QUEUED", "field = value"),
    ("state = RUNNING AND", "field = value"),
    ("state = STATE_UNSPECIFIED", "unknown state"),
])
def test_other_filters_name_the_filter_field(text, words):
    with pytest.raises(InvalidArgument) as error:
        paging.parse_run_filter(text)
    assert error.value.field == "filter" and words in error.value.description


def test_page_sizes_follow_aip_158():
    assert paging.page_size(0) == paging.DEFAULT_PAGE_SIZE
    assert paging.page_size(7) == 7
    assert paging.page_size(10**6) == paging.MAX_PAGE_SIZE
    with pytest.raises(InvalidArgument) as error:
        paging.page_size(-1)
    assert error.value.field == "page_size"


def test_tokens_round_trip_only_for_their_list():
    bound = paging.fingerprint("runs", "key", None, None)
    token = paging.encode_token(42, bound)
    assert paging.decode_token(token, bound) == 42
    assert paging.decode_token("", bound) is None
    other = paging.fingerprint("runs", "key", "RUNNING", None)
    for bad, where in ((token, other), ("%%%", bound), ("e30", bound),
                       (paging.encode_token(True, bound), bound)):
        with pytest.raises(InvalidArgument) as error:
            paging.decode_token(bad, where)
        assert error.value.field == "page_token"


def test_names_and_request_ids():
    run_id = str(uuid.uuid4())
    assert paging.parse_name(f"runs/{run_id}", "runs") == run_id
    for bad in (f"batches/{run_id}", f"runs/{run_id}/x", "runs/ABC", ""):
        with pytest.raises(InvalidArgument) as error:
            paging.parse_name(bad, "runs")
        assert error.value.field == "name"
    assert paging.check_request_id("") is None
    assert paging.check_request_id(run_id.upper()) == run_id
    with pytest.raises(InvalidArgument) as error:
        paging.check_request_id("retry-1")
    assert error.value.field == "request_id"
