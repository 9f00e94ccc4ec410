"""What a model is beyond its spec string: for local hf/ models, their files (models/hf_files.py).

A run records each hf/ model's identity (fingerprint, files, chat template, library versions) in its
store, refuses to add replies of a model whose files have changed since (unless forced), and scores later
under the recorded fingerprint, so re-scoring does not need the model's folder any more."""

from __future__ import annotations

from ..models import ModelRef
from ._store import Store

META = "model_identity:"


def record(spec: str, model, store: Store, *, force: bool = False) -> dict | None:
    """For a built hf/ model (anything with `identity()`; None: read from its files here without loading
    it, for a phase 1 that runs elsewhere, e.g. on Ray): check it against what this run recorded before,
    then record it as it is now. Other models have nothing to record."""
    from ..models.hf_files import check_unchanged
    if not spec.startswith("hf/") or (model is not None and not hasattr(model, "identity")):
        return None
    if model is None:
        from ..models import model_identity
        ident = model_identity(spec)
    else:
        ident = model.identity()
    if not force:
        check_unchanged(spec, store.get_meta(META + spec), ident)
    store.set_meta(META + spec, ident)
    return ident


def recorded(spec: str, store: Store | None) -> dict | None:
    return store.get_meta(META + spec) if store is not None and spec.startswith("hf/") else None


def model_ref(spec: str, base_url: str | None, store: Store | None = None) -> ModelRef:
    """The model's cache identity: for hf/ models, the fingerprint recorded when its replies were made."""
    ident = recorded(spec, store)
    return ModelRef(spec, base_url, fingerprint=ident["fingerprint"] if ident else None)
