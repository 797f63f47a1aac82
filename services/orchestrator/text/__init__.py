"""The text path: a text query and its drafts (`query`), self-consistency sampling, the decompose
and refine roles (`roles`, `reasoning`), the search over reasoning steps (`step_search`) and the
prompt templates (`prompts`)."""
