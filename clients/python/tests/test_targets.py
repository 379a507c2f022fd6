"""How ``server=`` (and LEASEHOLD_SERVER) becomes a gRPC target: no server needed."""

import pytest

from leasehold_client.options import grpc_target


def test_one_server_or_a_grpc_target_is_used_as_it_is():
    assert grpc_target("127.0.0.1:50051") == ("127.0.0.1:50051", [])
    assert grpc_target("http://lh.internal:50051") == ("lh.internal:50051", [])
    assert grpc_target("dns:///lh.internal:50051") == ("dns:///lh.internal:50051", [])
    assert grpc_target("ipv4:10.0.0.1:1,10.0.0.2:2") == ("ipv4:10.0.0.1:1,10.0.0.2:2", [])
    assert grpc_target("unix:/run/leasehold.sock") == ("unix:/run/leasehold.sock", [])


def test_a_list_becomes_one_target_of_every_address():
    authority = [("grpc.default_authority", "10.0.0.1:1")]
    assert grpc_target("10.0.0.1:1, 10.0.0.2:2,") == ("ipv4:10.0.0.1:1,10.0.0.2:2", authority)
    assert grpc_target("[::1]:1,[fe80::1]:2") == ("ipv6:[::1]:1,[fe80::1]:2",
                                              [("grpc.default_authority", "[::1]:1")])
    assert grpc_target("[::1]:1,10.0.0.2:2")[0] == "ipv6:[::1]:1,[::ffff:10.0.0.2]:2"
    target, options = grpc_target("localhost:1,127.0.0.1:2")  # names are resolved now
    assert target.startswith(("ipv4:", "ipv6:")), target
    assert target.endswith(("127.0.0.1:2", "127.0.0.1]:2")) and "localhost" not in target
    assert options == [("grpc.default_authority", "localhost:1")]


def test_a_list_without_ports_is_refused():
    with pytest.raises(ValueError, match="host:port"):
        grpc_target("10.0.0.1,10.0.0.2:2")
