"""The vocabulary both search engines share: their option types (`config`), the one result type
(`result`), the game contract (`game`), the tree (`tree`), the selection rules (`selection`) and
the root's noise and temperature draw (`root`). Imports no grpc."""
