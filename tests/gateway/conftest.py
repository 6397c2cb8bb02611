from __future__ import annotations

import pytest
from gateway_helpers import Served


@pytest.fixture(scope="module")
def tokenizer():
    from roll_core.models.policy_tokenizer import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="module")
def codec(tokenizer):
    from roll_core.chat.codec import ChatCodec

    return ChatCodec(tokenizer)


@pytest.fixture(scope="module")
def served(codec):
    served = Served(codec, max_request_bytes=64 * 1024)
    yield served
    served.close()
