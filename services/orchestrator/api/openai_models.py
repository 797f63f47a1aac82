"""The models of the OpenAI-compatible API: each names a way the mesh answers text (the
AnswerQueryRequest role and defaults it sets), listed by GET /v1/models with a description."""

from __future__ import annotations

from dataclasses import dataclass

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

OWNER = "mcts-mesh"


@dataclass(frozen=True)
class MeshModel:
    """One model id.

    Attributes:
        id: the `model` a request names.
        description: what the mesh does for it.
        role: the AnswerQueryRequest role it sets.
        sample_count: drafts per iteration it sets (None: the orchestrator's setting); the
            request's `mesh.sample_count` wins.
        mcts_iterations: simulations of the search over steps it sets (None: no search); the
            request's `mesh.mcts_iterations` wins.
    """

    id: str
    description: str
    role: int = pb.TEXT_ROLE_UNSPECIFIED
    sample_count: int | None = None
    mcts_iterations: int | None = None


MODELS: tuple[MeshModel, ...] = (
    MeshModel("mesh", "The mesh's default: passages retrieved, then the text router (when one "
              "is configured and confident) or the rules choose how to answer; by the rules, "
              "drafts voted on in the consensus loop."),
    MeshModel("mesh-draft", "One draft grounded in the retrieved passages, no vote: the "
              "quickest answer, streamed token by token as the language model writes it.",
              sample_count=1),
    MeshModel("mesh-self-consistency", "Self-consistency (Wang et al. 2022): 5 drafts sampled "
              "per iteration (mesh.sample_count), their final answers voted on, more sampled "
              "while the winner's share is below the agreement threshold.",
              pb.TEXT_ROLE_DRAFT, sample_count=5),
    MeshModel("mesh-step-search", "Search over reasoning steps (LATS, RAP): Monte Carlo tree "
              "search of 32 simulations (mesh.mcts_iterations) in which the language model "
              "proposes and values next steps and an arithmetic checker zeroes false ones.",
              pb.TEXT_ROLE_SEARCH, mcts_iterations=32),
    MeshModel("mesh-decompose", "Least-to-most (Zhou et al. 2022): the question split into "
              "sub-questions, each retrieved and answered in order, then the answers composed.",
              pb.TEXT_ROLE_DECOMPOSE),
    MeshModel("mesh-refine", "Self-refine (Madaan et al. 2023): a draft, then critique and "
              "revise until the critique finds nothing or mesh.max_refinements rounds.",
              pb.TEXT_ROLE_REFINE),
)
_BY_ID = {model.id: model for model in MODELS}


def find_model(model_id: str) -> MeshModel | None:
    """The model named `model_id`, or None."""
    return _BY_ID.get(model_id)


def model_object(model: MeshModel, created: int) -> dict[str, object]:
    """OpenAI's model object, with the mesh's `description`; `created` is when this front
    started serving it (Unix seconds)."""
    return {"id": model.id, "object": "model", "created": created, "owned_by": OWNER,
            "description": model.description}
