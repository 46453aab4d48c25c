"""The PrepareMedia task: a message's files fetched into the media bucket and understood (a voice
note transcribed, a document read) before the model is asked, by the attachments function.

That function is sized for files (resources.py); the agent function, which waits on the model for
seconds, is sized for waiting, and its Respond task then only reads each file's record
(services/turn/media.py, as every later request does). The task runs first in a turn whose
messages carry files (`lifecycle.start_after_rows` starts it at `next: media`); a file that joins
a turn without it (a message steered in while tools run) is fetched by the Respond task, as before.
"""

from __future__ import annotations

from dataclasses import replace

from hermes_gateway.domain.turn_state import Step, TurnKind, TurnState
from hermes_gateway.services.turn.context import window
from hermes_gateway.services.turn.deps import TurnDeps
from hermes_gateway.services.turn.media import understand_rows


def prepare_media(state: TurnState, deps: TurnDeps) -> TurnState:
    """The files of the rows the Respond task will read, each fetched and understood once (a
    repeated task finds their records); then the model is asked. The execution's clock starts
    here: the tool loop's bound counts this task's time too."""
    turn = state.turn
    if turn.kind is not TurnKind.CRON and turn.session_id is not None:
        understand_rows(turn, [row for row in window(turn, deps) if row.attachments], deps)
    loop = state.loop if state.loop.exec_started else replace(state.loop, exec_started=deps.now())
    return state.go(Step.MODEL, loop=loop)


__all__ = ["prepare_media"]
