"""cms.store.client.DriverTrouble: what the MongoDB driver's server monitoring logs."""

from __future__ import annotations

import pytest
from bson import ObjectId
from pymongo.hello import Hello
from pymongo.monitoring import ServerDescriptionChangedEvent
from pymongo.server_description import ServerDescription

from cms.store.client import DriverTrouble


def test_the_driver_losing_a_known_server_is_logged_once_per_loss(caplog: pytest.LogCaptureFixture) -> None:
    """cms.store.client.DriverTrouble: a known server turning Unknown is a WARNING (operations then
    wait in server selection); Unknown to Unknown, or Unknown to known, is not."""
    address = ("db", 27017)
    known = ServerDescription(address, Hello({"ok": 1, "isWritablePrimary": True, "maxWireVersion": 21}))
    lost = ServerDescription(address, error=ConnectionResetError("reset by peer"))
    listener = DriverTrouble()
    with caplog.at_level("WARNING", logger="cms.store"):
        listener.description_changed(ServerDescriptionChangedEvent(known, lost, address, ObjectId()))
        listener.description_changed(ServerDescriptionChangedEvent(lost, lost, address, ObjectId()))
        listener.description_changed(ServerDescriptionChangedEvent(lost, known, address, ObjectId()))
    assert [r.getMessage() for r in caplog.records] == [
        "MongoDB server db:27017 is unreachable for the driver (reset by peer); operations wait for it"]
