"""The records' typing at the Python -> numba boundary: a `GameFunctions` is typed once per set
of functions (`records._typeof_functions`), to the very type numba's own typing of a named tuple
gives, so the kernels compile and dispatch as they would without the cache."""

from __future__ import annotations

from numba.core import types
from numba.core.typing.typeof import Purpose, typeof

from services.mcts.games import connect4, tictactoe
from services.mcts.rollout.records import functions_of
from services.mcts.rollout.shared_kernel import no_key


def _numba_own_type(functions) -> types.Type:
    return types.BaseTuple.from_types([typeof(member, Purpose.argument) for member in functions],
                                      type(functions))


def test_a_game_functions_record_gets_numba_own_named_tuple_type() -> None:
    for functions in (functions_of(connect4.GAME), functions_of(connect4.UNIFORM_GAME),
                      functions_of(tictactoe.GAME, no_key)):
        assert typeof(functions, Purpose.argument) == _numba_own_type(functions)


def test_the_type_is_computed_once_per_set_of_functions() -> None:
    first = typeof(functions_of(connect4.GAME), Purpose.argument)
    again = typeof(functions_of(connect4.GAME), Purpose.argument)  # a new record, same functions
    assert again is first
    other = typeof(functions_of(connect4.UNIFORM_GAME), Purpose.argument)
    assert other != first  # no rollout of its own: another kernel specialisation
