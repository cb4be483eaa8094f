import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.pairing import PairingCodeError, pairing_code_decode, pairing_code_encode

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "plugin/tests/fixtures/pairing-codes.json").read_text()
)
# Any text that encodes as UTF-8 (no lone surrogates), never empty.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=80)
SERVERS = st.builds(
    "{}://{}{}".format,
    st.sampled_from(["http", "https"]),
    st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z]{2,6}){0,2}", fullmatch=True),
    st.one_of(st.just(""), st.integers(1, 65535).map(":{}".format)),
)


@given(server=SERVERS, client_id=TEXT, token=TEXT)
def test_a_code_round_trips(server, client_id, token):
    code = pairing_code_encode(server_url=server, client_id=client_id, token=token)

    assert code.startswith("conductor-pair:v1:")
    assert pairing_code_decode(code) == {"server": server, "client_id": client_id, "token": token}
    # Wrapped or padded by a mail or a terminal, it still reads.
    assert pairing_code_decode(f"  {code[:20]}\n{code[20:]}\n") == pairing_code_decode(code)


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda vector: vector["client_id"])
def test_the_encoder_writes_the_codes_the_plugin_reads(vector):
    fields = {key: vector[key] for key in ("server", "client_id", "token")}
    assert pairing_code_encode(server_url=vector["server"], client_id=vector["client_id"], token=vector["token"]) == (
        vector["code"]
    )
    assert pairing_code_decode(vector["code"]) == fields


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=lambda vector: vector["why"])
def test_a_malformed_truncated_or_foreign_code_is_refused_with_the_reason(vector):
    with pytest.raises(PairingCodeError) as raised:
        pairing_code_decode(vector["code"])
    assert str(raised.value) == vector["error"]
