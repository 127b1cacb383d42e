"""The rest of the API from Python against real `node` processes: a lock converted down lets a
reader in, a leader proclaims a new value, the lock table and the wait-for graph, and a node
serving the API over TLS with certificates made for the test."""

import dataclasses
import subprocess

import grpc
import pytest

from conftest import BOUND, NODE_BIN, TOKEN
from locks_client import TLS, Client, LocksError


def test_a_lock_converted_down_lets_a_reader_in(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    with client.session() as writer, client.session() as reader:
        writer.lock("db/x", mode="X")
        reader.lock_nowait("db/x", mode="S")
        assert reader.status() == "waiting"
        graph = client.graph()
        assert [(e.waiter, e.blocker) for e in graph.edges] == [(reader.agent, writer.agent)]
        table = client.table()
        (x,) = [l for l in table.nodes[0].locks if list(l.id) == ["db", "x"]]
        assert [e.agent for e in x.granted] == [writer.agent]
        assert [e.agent for e in x.waiting] == [reader.agent]
        writer.convert("db/x", "S")
        while True:
            event = reader.next_event(timeout=BOUND)
            assert event is not None and event.kind != "closed", "the reader is granted"
            if event.kind == "granted" and event.lock == "db/x":
                break
        with pytest.raises(LocksError) as e:
            writer.convert("db/x", "Q")
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_leader_proclaims_a_new_value(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    with client.campaign("svc", value=b"10.0.0.1:80") as campaign:
        leading = campaign.wait_leading(timeout=BOUND)
        assert leading.value == b"10.0.0.1:80"
        with client.observe("svc") as observer:
            changes = iter(observer)
            seen = next(changes)
            while not seen.value:
                seen = next(changes)
            assert (seen.leader, seen.value) == (leading.leader, b"10.0.0.1:80")
            client.proclaim("svc", leading, b"10.0.0.1:81")
            seen = next(changes)
            assert (seen.leader, seen.term) == (leading.leader, leading.term)
            assert seen.value == b"10.0.0.1:81"
        stale = dataclasses.replace(leading, term=leading.term + 1)
        with pytest.raises(LocksError) as e:
            client.proclaim("svc", stale, b"x")
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        # The leader as anybody sees it, without the campaign's secret, may not proclaim.
        public = type(leading)(True, leading.leader, leading.node, leading.term, False)
        with pytest.raises(LocksError) as e:
            client.proclaim("svc", public, b"x")
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_over_tls_only_a_client_with_a_certificate_of_the_ca_gets_in(nodes, tmp_path):
    # A CA and certificates for the node and the client, made for this test.
    made = subprocess.run(
        [NODE_BIN, "--gen-certs", str(tmp_path), "--names", "a,client"],
        capture_output=True,
        timeout=BOUND,
    )
    assert made.returncode == 0, made
    pem = lambda name: str(tmp_path / name)  # noqa: E731
    a = nodes(
        "a",
        extra=[
            "--client-tls-cert", pem("a.pem"),
            "--client-tls-key", pem("a.key"),
            "--client-tls-ca", pem("ca.pem"),
        ],
    )
    tls = TLS(ca=pem("ca.pem"), cert=pem("client.pem"), key=pem("client.key"))
    with Client(a.client_addr, token=TOKEN, tls=tls).lock("db/x") as grant:
        assert grant.tokens["a"] > 0
    # Without a client certificate the handshake fails: no session.
    with pytest.raises(LocksError) as e:
        Client(a.client_addr, token=TOKEN, tls=TLS(ca=pem("ca.pem")), keepalive=2).session()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
