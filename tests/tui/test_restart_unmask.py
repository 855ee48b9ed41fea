"""The restart dialog shows the command with its secrets masked; editing it must not
mean typing them on screen: masked words get the running command's own back."""

from __future__ import annotations

import pytest

from rampwatch.app.restart import unmask
from rampwatch.core.errors import UserError
from rampwatch.loadgen.server.managed import ServeCommand

COMMAND = "HF_TOKEN=hf_abc rampwatch sim --port 18999 --api-key sk-one --token sk-two --max-num-seqs 8"


@pytest.fixture
def command() -> ServeCommand:
    return ServeCommand.parse(COMMAND)


def test_the_dialog_never_shows_the_secrets(command):
    assert "sk-one" not in command.shown and "sk-two" not in command.shown and "hf_abc" not in command.shown


def test_masked_words_come_back_in_their_order(command):
    edited = command.shown.replace("--max-num-seqs 8", "--max-num-seqs 64")
    assert unmask(edited, command) == COMMAND.replace("--max-num-seqs 8", "--max-num-seqs 64")


def test_text_without_masks_is_left_as_typed(command):
    assert unmask("rampwatch sim --port 18999", command) == "rampwatch sim --port 18999"


def test_a_mask_that_is_not_the_commands_is_refused(command):
    with pytest.raises(UserError, match="masked value"):
        unmask(command.shown + " --other-key '<redacted>'", command)
