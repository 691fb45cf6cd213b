"""The local broker's KRaft cluster id is always one ``kafka-storage format -t`` accepts."""

import re

from gpuledger.stack.kafka import new_cluster_id

_BASE64URL_22 = re.compile(r"^[A-Za-z0-9_-]{22}$")


def test_ten_thousand_ids_are_base64url_and_never_start_with_a_dash():
    ids = [new_cluster_id() for _ in range(10_000)]
    assert all(_BASE64URL_22.match(i) for i in ids)
    assert not [i for i in ids if i.startswith("-")]
    assert len(set(ids)) == len(ids)


def test_an_id_that_would_start_with_a_dash_is_drawn_again():
    # a first byte 0xF8..0xFB encodes to '-' (62) as the first base64url character
    draws = iter([b"\xf8" + bytes(15), b"\xfb" + bytes(15), b"\x00" * 16])
    assert new_cluster_id(lambda: next(draws)) == "A" * 22
