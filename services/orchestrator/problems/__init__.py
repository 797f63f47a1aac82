"""The problem types the loop solves with a checker: Connect Four positions, Sudoku grids, mazes
(each its parsing, checking and synthesis from a tally), the puzzle base they share, and the
arithmetic checker the text path's step search uses."""
