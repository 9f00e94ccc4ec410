"""Sample.to_json: what the store and the executors serialise for every sample. It is written field by
field (no deep copy); its JSON must be `asdict`'s, field for field, and read back by from_json."""

import dataclasses
import json

from trustmh.types import Item, Sample


def samples():
    item = Item(id="esconv-7", input={"context": [{"speaker": "seeker", "text": "I can't sleep"}]},
                target="That sounds exhausting.", meta={"emotion": "anxiety", "n": [1, 2]})
    yield Sample(task="reliability.support", item=item,
                 messages=[{"role": "system", "content": "You are a counsellor."},
                           {"role": "user", "content": "I can't sleep"}])
    yield Sample(task="crisis.severity", item=Item(id="3", input={}), messages=[], variant="typo:2",
                 choices=("1", "2", "3"), params={"temperature": 0, "max_tokens": 5}, request_task="crisis.base",
                 exact_params=True, model_prefix=("qwen", "/no_think "))


def test_to_json_is_asdicts_json_and_round_trips():
    for s in samples():
        want = dataclasses.asdict(s)
        want["choices"] = list(s.choices) if s.choices is not None else None
        got = s.to_json()
        assert list(got) == [f.name for f in dataclasses.fields(Sample)]  # a new field cannot be forgotten
        assert list(got["item"]) == [f.name for f in dataclasses.fields(Item)]
        assert json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False)
        assert Sample.from_json(json.loads(json.dumps(got))) == s
