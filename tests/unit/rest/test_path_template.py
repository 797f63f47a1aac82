"""Path templates: parsing per google/api/http.proto and matching as grpc-gateway v2's ServeMux."""

from __future__ import annotations

import pytest
from mesh.orchestrator.v1 import orchestrator_service_pb2

from libs.rest.bindings import Router, RouteStatus, service_bindings
from libs.rest.path_template import SegmentKind, TemplateError, parse_template


def _split(path: str) -> list[str]:
    return path[1:].split("/")


def test_literal_segments_and_verb():
    template = parse_template("/v1/problems:solve")
    assert [segment.literal for segment in template.segments] == ["v1", "problems"]
    assert template.verb == "solve"
    assert template.variables == ()
    assert template.match(["v1", "problems"], "solve") == {}
    assert template.match(["v1", "problems"], "") is None
    assert template.match(["v1", "problem"], "solve") is None


def test_variable_binds_one_segment():
    template = parse_template("/v1/threads/{thread_id}/queries:answer")
    assert [variable.name for variable in template.variables] == ["thread_id"]
    assert template.match(_split("/v1/threads/t-9/queries"), "answer") == {"thread_id": "t-9"}
    assert template.match(_split("/v1/threads/a/b/queries"), "answer") is None


def test_variable_with_pattern_and_nested_field_path():
    template = parse_template("/v1/{parent.name=projects/*/locations/*}/items")
    [variable] = template.variables
    assert variable.field_path == ("parent", "name")
    assert template.match(_split("/v1/projects/p1/locations/eu/items"), "") == {
        "parent.name": "projects/p1/locations/eu"}
    assert template.match(_split("/v1/projects/p1/zones/eu/items"), "") is None


def test_deep_wildcard_takes_the_middle_and_leaves_the_tail():
    template = parse_template("/v1/{name=files/**}/content:read")
    assert template.segments[-2].kind is SegmentKind.DEEP_WILDCARD
    assert template.match(_split("/v1/files/a/b/c/content"), "read") == {"name": "files/a/b/c"}
    assert template.match(_split("/v1/files/content"), "read") == {"name": "files/"}
    assert template.match(_split("/v1/content"), "read") is None


def test_verb_after_a_variable_is_split_at_the_first_colon():
    template = parse_template("/v1/{name}:cancel")
    assert template.verb == "cancel"
    assert template.match(["v1", "op-1"], "cancel") == {"name": "op-1"}


def test_unnamed_wildcards_match_without_binding():
    template = parse_template("/v1/*/items/**")
    assert template.match(_split("/v1/x/items/a/b"), "") == {}
    assert template.match(_split("/v1/x/other/a"), "") is None


def test_root_template():
    template = parse_template("/")
    assert template.match([""], "") == {}
    assert template.match(["a"], "") is None


@pytest.mark.parametrize("text", [
    "v1/items",                 # no leading slash
    "/v1//items",               # empty segment
    "/v1/{name",                # unterminated variable
    "/v1/{a={b}}",              # nested variable
    "/v1/{1name}",              # bad identifier
    "/v1/{name}/{name}",        # bound twice
    "/v1/**/x/**",              # two deep wildcards
    "/v1/items:",               # empty verb
    "/v1/it ems",               # bad literal
    "/v1/{name}x",              # text after a variable in the same segment
])
def test_malformed_templates_are_rejected(text):
    with pytest.raises(TemplateError):
        parse_template(text)


def test_openapi_path_keeps_variables_and_verb():
    assert parse_template("/v1/{parent.name}/items:list").openapi_path() == \
        "/v1/{parent.name}/items:list"
    template = parse_template("/v1/{parent.name=projects/*}/items:list")
    assert template.openapi_path() == "/v1/projects/{project}/items:list"
    assert [name for name, _ in template.openapi_parameters()] == ["project"]


def test_openapi_paths_of_sub_templates_are_distinct():
    # both would be "/v1/{name}" otherwise, and one operation would replace the other
    documents = parse_template("/v1/{name=collections/*/documents/**}")
    collection = parse_template("/v1/{name=collections/*}")
    assert documents.openapi_path() == "/v1/collections/{collection}/documents/{document}"
    assert collection.openapi_path() == "/v1/collections/{collection}"
    assert parse_template("/v1/{name=batches/*}:watch").openapi_path() == \
        "/v1/batches/{batch}:watch"
    assert [(name, variable.name) for name, variable in documents.openapi_parameters()] == \
        [("collection", "name"), ("document", "name")]
    assert parse_template("/v1/{a=*/*}/{b=x/*}").openapi_path() == "/v1/{a_0}/{a_1}/x/{x}"


def _router() -> Router:
    service = orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"]
    return Router(service_bindings(service))


def test_router_matches_the_orchestrator_bindings():
    router = _router()
    post = router.match("POST", "/v1/threads/t1/problems:solve")
    assert post.status is RouteStatus.FOUND
    assert post.binding.method.name == "SolveProblem" and post.binding.index == 2
    assert post.path_values == {"thread_id": "t1"}
    get = router.match("GET", "/v1/problems:solve")
    assert get.binding.body == "" and get.binding.index == 1
    ingest = router.match("POST", "/v1/collections/scifact/documents:ingest")
    assert ingest.binding.method.name == "IngestDocuments"
    assert ingest.path_values == {"collection": "scifact"}


def test_router_statuses_for_unknown_paths_and_methods():
    router = _router()
    assert router.match("POST", "/v1/problems:unknown").status is RouteStatus.NOT_FOUND
    assert router.match("POST", "/v1/problems").status is RouteStatus.NOT_FOUND
    assert router.match("PUT", "/v1/queries:answer").status is RouteStatus.METHOD_NOT_ALLOWED
    # a last component that is only ":" + verb is a 404 in grpc-gateway
    assert router.match("POST", "/v1/threads/:answer").status is RouteStatus.NOT_FOUND


def test_a_colon_in_a_variable_is_kept_when_the_verb_is_split_off():
    router = _router()
    match = router.match("POST", "/v1/threads/a:b/queries:answer")
    assert match.path_values == {"thread_id": "a:b"}
