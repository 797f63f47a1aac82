"""Routing policies: the rule routers and the Connect Four routes (`rules`), the learned router's
wrapper (`learned`), the neural service's route predictors (`predictors`) and the routing log
(`log`)."""
