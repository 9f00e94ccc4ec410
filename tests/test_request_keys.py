"""A request's store key and flight key hash the canonical JSON of what it asks. Stores, replay files and
earlier runs hold these keys, so however they are built they must stay the very text json.dumps gives for
the whole payload (checked here on awkward content) and the keys an earlier version wrote."""

import hashlib
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from trustmh.types import Request


def reference_keys(r: Request, endpoint: str) -> tuple[str, str]:
    """The keys as json.dumps makes them from the whole payload (the definition the stores were written with)."""
    def blob(payload: dict) -> bytes:
        return json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    cache = {"endpoint": endpoint, "messages": r.messages, "params": r.params, "task": r.task,
             "item_id": r.item_id, "variant": r.variant, "purpose": r.purpose}
    body = {"endpoint": endpoint, "messages": r.messages, "params": r.params, "choices": r.choices,
            "purpose": r.purpose}
    return hashlib.sha256(blob(cache)).hexdigest(), "body:" + hashlib.sha256(blob(body)).hexdigest()


text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": text})
scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False), text)
params = st.dictionaries(text, st.one_of(scalar, st.lists(scalar, max_size=3),
                                         st.dictionaries(text, scalar, max_size=3)), max_size=5)
requests = st.builds(Request, messages=st.lists(message, max_size=6), params=params, task=text, item_id=text,
                     variant=text, purpose=text, choices=st.one_of(st.none(), st.tuples(text, text)))


@settings(max_examples=300, deadline=None)
@given(requests, text)
def test_keys_are_the_canonical_json_of_the_payload(r, endpoint):
    assert (r.cache_key(endpoint), r.body_key(endpoint)) == reference_keys(r, endpoint)


def test_a_key_taken_from_a_store_of_an_earlier_version_still_matches():
    # The keys trustmh 9d1dc13 (json.dumps over the whole payload) gave this request: what its stores hold.
    r = Request([{"role": "system", "content": "Tu es « calme »."}, {"role": "user", "content": "I feel low\n"}],
                {"temperature": 0.0, "max_tokens": 64, "seed": 7}, "crisis.escalation", "12", "", "generate",
                ("1", "2"))
    assert r.cache_key("openai/gpt-4o-mini") == "9f0b22b9d7f580a499f2d71153337ded025b8b005ea72ffc196aec702dc302f4"
    assert r.body_key("openai/gpt-4o-mini") == \
        "body:1a3692d521815c94374c8c08f469608253d6c8e0265005dfa91ee4d9f55c73fc"
    # Keys differ with what they hash: the sample for the store key, the choices for the flight key.
    assert r.cache_key("e") != Request(r.messages, r.params, r.task, "13", r.variant, r.purpose, r.choices).cache_key("e")
    assert r.body_key("e") == Request(r.messages, r.params, r.task, "13", r.variant, r.purpose, r.choices).body_key("e")
    assert r.body_key("e") != Request(r.messages, r.params, r.task, r.item_id, r.variant, r.purpose, None).body_key("e")
