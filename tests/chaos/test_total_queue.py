"""The total-queue checker on literal histories named after the anomaly (Jepsen style)."""

from reports.checkers.total_queue import check_total_queue


def op(process, type_, f, value):
    return {"process": process, "type": type_, "f": f, "value": value}


def send(process, message_id, outcome="ok"):
    return [op(process, "invoke", "send", {"id": message_id}), op(process, outcome, "send", {"id": message_id})]


def receive(process, message_id):
    return [op(process, "invoke", "receive", None), op(process, "ok", "receive", {"id": message_id})]


def drain(*ids):
    return [op(9, "invoke", "drain", None), op(9, "ok", "drain", [{"id": i} for i in ids])]


def test_clean_run_is_valid():
    history = send(0, "a") + send(0, "b") + receive(1, "a") + drain("b")
    result = check_total_queue(history)
    assert result.valid is True and (result.attempted, result.enqueued, result.dequeued) == (2, 2, 2)


def test_lost_message():
    result = check_total_queue(send(0, "a") + send(0, "b") + receive(1, "a") + drain())
    assert result.valid is False and result.lost == ["b"] and "1 lost" in result.reason


def test_duplicate_after_ack():
    result = check_total_queue(send(0, "a") + receive(1, "a") + drain("a"))
    assert result.valid is False and result.duplicated == {"a": 2}


def test_duplicates_tolerated_when_the_semantics_allow_them():
    result = check_total_queue(send(0, "a") + receive(1, "a") + drain("a"), duplicates_allowed=True)
    assert result.valid is True and result.duplicated == {"a": 2}


def test_unexpected_message():
    result = check_total_queue(send(0, "a") + drain("a", "ghost"))
    assert result.valid is False and result.unexpected == ["ghost"]


def test_recovered_info_send():
    result = check_total_queue(send(0, "a", outcome="info") + drain("a"))
    assert result.valid is True and result.recovered == ["a"] and result.lost == []


def test_info_send_that_never_arrived_is_not_lost():
    result = check_total_queue(send(0, "a", outcome="info") + drain())
    assert result.valid is True and result.lost == []


def test_failed_send_that_arrives_is_unexpected():
    result = check_total_queue(send(0, "a", outcome="fail") + drain("a"))
    assert result.valid is False and result.unexpected == ["a"]


def test_without_a_drain_the_verdict_is_unknown():
    result = check_total_queue(send(0, "a") + receive(1, "a"))
    assert result.valid == "unknown" and "drain" in result.reason


def test_without_a_drain_an_unreceived_message_is_not_called_lost():
    # "b" was confirmed and not received, but with no drain it may still be queued.
    result = check_total_queue(send(0, "a") + send(0, "b") + receive(1, "a"))
    assert result.valid == "unknown" and result.lost == ["b"] and "maybe still queued" in result.reason


def test_without_a_drain_an_unexpected_message_still_fails():
    result = check_total_queue(send(0, "a") + receive(1, "a") + receive(1, "zz"))
    assert result.valid is False and result.unexpected == ["zz"]


def test_nemesis_events_are_ignored():
    history = [op("nemesis", "info", "kill", {"node": "A"})] + send(0, "a") + drain("a")
    assert check_total_queue(history).valid is True


# --------------------------------------------------------------------------- redelivery after ack

from reports.checkers.redelivery import check_no_redelivery_after_ack  # noqa: E402


def ack(process, message_id, outcome="ok"):
    return [op(process, "invoke", "ack", {"id": message_id}), op(process, outcome, "ack", {"id": message_id})]


def test_duplicate_after_ack_is_caught():
    history = send(0, "a") + receive(1, "a") + ack(1, "a") + drain("a")
    result = check_no_redelivery_after_ack(history)
    assert result.valid is False and list(result.redelivered_after_ack) == ["a"]


def test_redelivery_of_an_unconfirmed_ack_is_allowed():
    history = send(0, "a") + receive(1, "a") + ack(1, "a", outcome="info") + drain("a")
    result = check_no_redelivery_after_ack(history)
    assert result.valid is True and result.acknowledged == 0


def test_redelivery_after_an_unanswered_amqp_ack_is_allowed():
    # AMQP settles the disposition on send: the workload records the ack ok but unconfirmed.
    history = send(0, "a") + receive(1, "a") + [op(1, "invoke", "ack", {"id": "a"}),
                                                op(1, "ok", "ack", {"id": "a", "confirmed": False})] + drain("a")
    result = check_no_redelivery_after_ack(history)
    assert result.valid is True and result.acknowledged == 0
