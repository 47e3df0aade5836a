"""test_meta_decode.py — piperec_client's TrainingBatch field decoder (issue 22).

_decode_fields runs per batch on every raw batch's meta section and every
protobuf batch; it is an inline loop with field tables and a cache of the
packed vocabulary sizes. These tests check it against a plain reading of
the same bytes through the generic `_fields` walk, field by field: every
kind (varints one and several bytes long, negative event times, packed and
unpacked vocab sizes, offsets, recycled notices, names, unknown fields of
each wire type), the cache across batches whose sizes change, and the
errors on truncated input."""

import struct

import pytest

import piperec_client as pc


def _meta(vocab, seq=300, recycled=True, unknown=True):
    packed = b"".join(pc._varint(v) for v in vocab)
    rng = (pc._field_bytes(1, b"events") + pc._field_varint(2, 5) + pc._field_varint(3, 1 << 40)
           + pc._field_varint(4, (1 << 40) + 9) + pc._field_varint(5, 10))
    rec = (pc._field_bytes(1, b"".join(pc._varint(x) for x in (1, 2)))
           + pc._field_bytes(2, b"".join(pc._varint(x) for x in (7, 8)))
           + pc._field_varint(3, 4) + pc._field_varint(3, 5)
           + pc._field_bytes(4, b"".join(pc._varint(x) for x in (1, 1))))
    m = (pc._field_bytes(1, b"pipe") + pc._field_varint(2, seq) + pc._field_varint(3, 4096)
         + pc._field_varint(4, 13) + pc._field_varint(5, len(vocab)) + pc._field_varint(6, 8)
         + pc._field_bytes(10, rng) + pc._field_bytes(10, rng)
         + pc._field_varint(11, (1 << 64) - 5) + pc._field_varint(12, 1700000000000)
         + pc._field_varint(13, 1700000000123) + pc._field_bytes(14, packed)
         + pc._field_varint(14, 77) + pc._field_bytes(15, b"C1") + pc._field_varint(16, 3)
         + pc._field_bytes(17, "r\u00e9plica".encode()) + pc._field_varint(20, 1)
         + pc._field_varint(21, 2) + pc._field_varint(22, 0) + pc._field_bytes(23, b"k1")
         + pc._field_bytes(23, b"k2") + pc._field_varint(26, 1) + pc._field_bytes(29, b"click")
         + pc._field_bytes(30, b"I1") + pc._field_bytes(8, b"\0" * 52))
    if recycled:
        m += pc._field_bytes(18, rec)
    if unknown:  # fields of each wire type the decoder does not know: skipped
        m += (pc._field_varint(99, 1 << 50) + pc._varint((98 << 3) | 1) + b"\1" * 8
              + pc._varint((97 << 3) | 5) + b"\2" * 4 + pc._field_bytes(96, b"xyz"))
    return m


def _reference(buf):
    """The fields read one by one through the generic walk."""
    b, keys, spans = pc._new_batch(), [], {}
    names = {2: "sequence", 3: "rows", 4: "n_dense", 5: "n_sparse", 6: "sparse_width",
             16: "epoch", 21: "hot_version", 26: "n_labels"}
    for num, wt, v, a, e in pc._fields(buf, 0, len(buf)):
        text = bytes(buf[a:e]).decode(errors="replace")
        if wt == 0:
            if num in names: setattr(b, names[num], v)
            elif num in (11, 12, 13): setattr(b, ("min_event_time_ms", "max_event_time_ms",
                                                  "emit_time_ms")[num - 11], pc._signed64(v))
            elif num == 14: b.vocab_sizes.append(v)
            elif num == 20: b.popular = v != 0
            elif num == 22: b.jagged = v != 0
        elif wt == 2:
            if num == 1: b.pipeline = text
            elif num in (7, 8, 9, 24, 25, 27, 28): spans[num] = (a, e)
            elif num == 23: keys.append(text)
            elif num == 29: b.label_names.append(text)
            elif num == 30: b.dense_names.append(text)
            elif num == 10: b.offsets.append(pc._decode_range(buf, a, e))
            elif num == 14: b.vocab_sizes += pc._packed_varints(buf, a, e)
            elif num == 15: b.sparse_names.append(text)
            elif num == 17: b.replica = text
            elif num == 18: b.recycled = pc._decode_recycled(buf, a, e)
    return b, spans, keys


def _state(b):
    return {k: getattr(b, k, None) for k in pc.Batch.__slots__}


@pytest.mark.parametrize("vocab", [[100000] * 26, [1, 127, 128, 16383, 16384, (1 << 63) + 1], []])
def test_decode_fields_matches_the_generic_walk(vocab):
    for buf in (_meta(vocab), bytearray(_meta(vocab, recycled=False)), _meta(vocab, unknown=False)):
        want, wspans, wkeys = _reference(buf)
        for _ in range(2):  # the second time through the packed-sizes cache
            got = pc._new_batch()
            spans, keys = pc._decode_fields(got, buf, 0, len(buf))
            assert (spans, keys) == (wspans, wkeys)
            assert _state(got) == _state(want)
            assert type(got.vocab_sizes) is list


def test_vocab_sizes_cache_follows_the_bytes():
    """Growing vocabularies: each batch gets its own sizes, and a batch's
    list is its own (appending to it changes no other batch's)."""
    seen = []
    for k in range(100):  # more distinct sizes than the cache holds
        vocab = [1000 + k + i for i in range(26)]
        b = pc._new_batch()
        pc._decode_fields(b, _meta(vocab, seq=k), 0, len(_meta(vocab, seq=k)))
        assert b.vocab_sizes == vocab + [77] and b.sequence == k
        seen.append(b)
    seen[0].vocab_sizes.append(5)
    b = pc._new_batch()
    buf = _meta([1000 + i for i in range(26)])
    pc._decode_fields(b, buf, 0, len(buf))
    assert b.vocab_sizes == [1000 + i for i in range(26)] + [77]


def test_decode_fields_truncated():
    buf = _meta([5] * 4)
    for cut in (pc._field_bytes(1, b"pipe")[:-1], pc._varint((98 << 3) | 1) + b"\1" * 3,
                pc._varint((97 << 3) | 3)):
        with pytest.raises((ValueError, struct.error)):
            pc._decode_fields(pc._new_batch(), buf + cut, 0, len(buf + cut))
    with pytest.raises(ValueError):  # a field running past `end`
        pc._decode_fields(pc._new_batch(), buf, 0, len(buf) - 1)


def test_decode_fields_without_an_end_reads_to_the_buffers_end():
    """decode_batch(buf) and _decode_fields(..., end=None), as callers that
    pass a whole message do (the fault tests' dead-letter and Kafka sink
    readers): the whole buffer, as with end=len(buf)."""
    buf = _meta([7] * 26)
    want, got = pc._new_batch(), pc._new_batch()
    assert pc._decode_fields(got, buf, 0, None) == pc._decode_fields(want, buf, 0, len(buf))
    assert _state(got) == _state(want)
