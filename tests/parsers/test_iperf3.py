"""Tests for clustercert.parsers.iperf3.

The corpus' iperf3 samples are reference-only; the inputs below are written for this project in
iperf3's output formats.
"""

from __future__ import annotations

import json

import pytest

from clustercert.parsers import ParseError, parse


def iperf_json(**overrides) -> str:
    doc = {
        "start": {
            "connected": [{"socket": 5, "local_host": "10.9.0.2", "local_port": 40100,
                           "remote_host": "10.9.0.1", "remote_port": 5201}],
            "version": "iperf 3.12",
            "connecting_to": {"host": "10.9.0.1", "port": 5201},
            "test_start": {"protocol": "TCP", "num_streams": 4, "blksize": 131072, "omit": 0,
                           "duration": 20, "bytes": 0, "blocks": 0, "reverse": 0, "tos": 0},
        },
        "intervals": [{"sum": {}}, {"sum": {}}],
        "end": {
            "sum_sent": {"start": 0, "end": 20.0, "seconds": 20.0, "bytes": 231250000000,
                         "bits_per_second": 92500000000.0, "retransmits": 17, "sender": True},
            "sum_received": {"start": 0, "end": 20.04, "seconds": 20.04, "bytes": 231000000000,
                             "bits_per_second": 92215568862.3, "sender": True},
        },
    }
    for key, value in overrides.items():
        doc[key] = value
    return json.dumps(doc, indent=1)


def test_json_tcp_client():
    rec = parse("iperf3-json", iperf_json())
    assert rec["ok"] is True and rec["error"] is None and rec["role"] == "client"
    assert (rec["protocol"], rec["num_streams"], rec["duration_s"]) == ("TCP", 4, 20)
    assert (rec["remote_host"], rec["remote_port"], rec["version"]) == ("10.9.0.1", 5201, "iperf 3.12")
    assert rec["sender"] == {"bytes": 231250000000, "seconds": 20.0, "gbit_per_s": 92.5, "retransmits": 17}
    assert rec["receiver"]["gbit_per_s"] == pytest.approx(92.2155688623)
    assert rec["intervals"] == 2


def test_json_error_member_is_not_ok():
    text = json.dumps({"start": {"connected": [], "version": "iperf 3.12", "test_start": {}},
                       "intervals": [], "end": {},
                       "error": "unable to connect to server: Connection refused"})
    rec = parse("iperf3-json", text)
    assert rec["ok"] is False and rec["error"] == "unable to connect to server: Connection refused"
    assert rec["sender"] is None


def test_json_receiver_zero_bytes_is_not_ok():
    end = json.loads(iperf_json())["end"]
    end["sum_received"].update(bytes=0, bits_per_second=0)
    rec = parse("iperf3-json", iperf_json(end=end))
    assert rec["ok"] is False and rec["error"] == "receiver reported 0 bytes received"


def test_json_udp_sum_and_trailing_prompt():
    end = {"sum": {"start": 0, "end": 10, "seconds": 10, "bytes": 1250000000, "bits_per_second": 1e9,
                   "jitter_ms": 0.012, "lost_packets": 3, "packets": 863000, "lost_percent": 0.000347}}
    start = json.loads(iperf_json())["start"]
    start["test_start"]["protocol"] = "UDP"
    rec = parse("iperf3-json", iperf_json(start=start, end=end) + "\nuser@host:~$ \n")
    assert rec["protocol"] == "UDP"
    assert rec["udp"] == {"jitter_ms": 0.012, "lost_packets": 3, "packets": 863000, "lost_percent": 0.000347}
    assert rec["receiver"]["gbit_per_s"] == 1.0


def test_json_parse_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("iperf3-json", "")
    with pytest.raises(ParseError, match="JSON object"):
        parse("iperf3-json", "Connecting to host 10.0.0.1, port 5201\n")
    with pytest.raises(ParseError, match="invalid JSON"):
        parse("iperf3-json", iperf_json()[:200])
    with pytest.raises(ParseError, match="'start' and 'end'"):
        parse("iperf3-json", '{"nvidia_smi_log": {}}')
    with pytest.raises(ParseError, match="truncated"):
        parse("iperf3-json", iperf_json(end={}))


TCP_CLIENT_P2 = """Connecting to host 10.9.0.1, port 5201
[  5] local 10.9.0.2 port 40200 connected to 10.9.0.1 port 5201
[  7] local 10.9.0.2 port 40202 connected to 10.9.0.1 port 5201
[ ID] Interval           Transfer     Bitrate         Retr  Cwnd
[  5]   0.00-1.00   sec  5.40 GBytes  46.4 Gbits/sec    2   3.10 MBytes
[  7]   0.00-1.00   sec  5.38 GBytes  46.2 Gbits/sec    0   3.02 MBytes
[SUM]   0.00-1.00   sec  10.8 GBytes  92.6 Gbits/sec    2
- - - - - - - - - - - - - - - - - - - - - - - - -
[ ID] Interval           Transfer     Bitrate         Retr
[  5]   0.00-1.00   sec  5.40 GBytes  46.4 Gbits/sec    2             sender
[  5]   0.00-1.04   sec  5.39 GBytes  44.5 Gbits/sec                  receiver
[  7]   0.00-1.00   sec  5.38 GBytes  46.2 Gbits/sec    0             sender
[  7]   0.00-1.04   sec  5.37 GBytes  44.3 Gbits/sec                  receiver
[SUM]   0.00-1.00   sec  10.8 GBytes  92.6 Gbits/sec    2             sender
[SUM]   0.00-1.04   sec  10.8 GBytes  88.8 Gbits/sec                  receiver

iperf Done.
"""


def test_text_tcp_client_two_streams_uses_sum():
    rec = parse("iperf3", TCP_CLIENT_P2)
    assert rec["ok"] is True and rec["role"] == "client" and rec["protocol"] == "TCP"
    assert rec["num_streams"] == 2
    assert (rec["remote_host"], rec["remote_port"]) == ("10.9.0.1", 5201)
    assert rec["sender"]["gbit_per_s"] == 92.6 and rec["sender"]["retransmits"] == 2
    assert rec["receiver"]["gbit_per_s"] == 88.8 and rec["receiver"]["seconds"] == 1.04
    assert rec["sender"]["bytes"] == int(10.8 * 1024**3)
    assert rec["intervals"] == 2


UDP_SERVER = """-----------------------------------------------------------
Server listening on 5201 (test #1)
-----------------------------------------------------------
Accepted connection from 10.9.0.2, port 40300
[  5] local 10.9.0.1 port 5201 connected to 10.9.0.2 port 51000
[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams
[  5]   0.00-1.00   sec   119 MBytes  1000 Mbits/sec  0.010 ms  0/86000 (0%)
- - - - - - - - - - - - - - - - - - - - - - - - -
[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams
[  5]   0.00-1.00   sec   119 MBytes   998 Mbits/sec  0.010 ms  12/86000 (0.014%)  receiver
-----------------------------------------------------------
Server listening on 5201 (test #2)
-----------------------------------------------------------
"""


def test_text_udp_server():
    rec = parse("iperf3", UDP_SERVER)
    assert rec["ok"] is True and rec["role"] == "server" and rec["protocol"] == "UDP"
    assert rec["sender"] is None
    assert rec["receiver"]["gbit_per_s"] == 0.998
    assert rec["udp"] == {"jitter_ms": 0.01, "lost_packets": 12, "packets": 86000, "lost_percent": 0.014}
    assert rec["remote_host"] == "10.9.0.2"


def test_text_error_is_not_ok():
    rec = parse(
        "iperf3",
        "iperf3: error - unable to connect to server - server may have stopped running or use a different "
        "port, firewall issue, etc.: Connection refused\n",
    )
    assert rec["ok"] is False
    assert rec["error"].startswith("unable to connect to server")


def test_text_parse_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("iperf3", " \n")
    truncated = TCP_CLIENT_P2[: TCP_CLIENT_P2.index("- - - -")]
    with pytest.raises(ParseError, match="no sender/receiver summary"):
        parse("iperf3", truncated)
    with pytest.raises(ParseError, match="no sender/receiver summary"):
        parse("iperf3", iperf_json())


# --- issue 21.2/21.3: --timestamps text, leading bytes before -J output, JSON "error" member
# Fixtures: tests/fixtures/iperf3 (see SOURCES.md; *-constructed files are written for this project).

def fixture(fixture_text, name: str) -> str:
    return fixture_text(f"iperf3/{name}")


def test_text_timestamps_server_error_issue1808(fixture_text):
    rec = parse(
        "iperf3",
        fixture(fixture_text, "iperf3-s-timestamps-V-d-3.17.1-param-exchange-error-issue1808-excerpt.txt"),
    )
    assert rec["timestamped"] is True and rec["role"] == "server"
    assert rec["ok"] is False
    assert rec["error"] == "unable to receive parameters from client: Bad file descriptor"
    assert rec["version"] == "iperf 3.17.1+"
    assert rec["sender"] is None and rec["receiver"] is None


def test_text_timestamps_server_error_pr1885(fixture_text):
    rec = parse(
        "iperf3", fixture(fixture_text, "iperf3-s-timestamps-V-d-3.19-cookie-error-pr1885-excerpt.txt")
    )
    assert rec["timestamped"] is True and rec["role"] == "server" and rec["ok"] is False
    assert rec["error"] == "unable to receive cookie at server: Bad file descriptor"
    assert rec["version"] == "iperf 3.19+"


def test_text_timestamps_client_summary(fixture_text):
    rec = parse("iperf3", fixture(fixture_text, "iperf3-c-timestamps-default-format-constructed.txt"))
    assert rec["ok"] is True and rec["timestamped"] is True
    assert (rec["remote_host"], rec["remote_port"]) == ("10.20.0.11", 5201)
    assert rec["sender"] == {
        "bytes": int(8.18 * 1024**3),
        "seconds": 3.0,
        "gbit_per_s": 23.4,
        "retransmits": 12,
    }
    assert rec["receiver"]["gbit_per_s"] == 23.1 and rec["receiver"]["seconds"] == 3.04
    assert rec["intervals"] == 3 and rec["num_streams"] == 1


def test_text_custom_timestamp_formats():
    # --timestamps="%s " and --timestamps="%Y-%d-%m %H:%M:%S " (formats shown in esnet/iperf#1055,
    # nrfconnect/sdk-nrf#5724)
    base = TCP_CLIENT_P2.splitlines()
    for stamp in ("1601064279 ", "2021-28-09 13:12:35 "):
        rec = parse("iperf3", "\n".join(stamp + ln for ln in base))
        assert rec["timestamped"] is True and rec["sender"]["gbit_per_s"] == 92.6
        assert rec["receiver"]["gbit_per_s"] == 88.8 and rec["num_streams"] == 2
    assert parse("iperf3", TCP_CLIENT_P2)["timestamped"] is False


def test_json_error_member_real_issue545(fixture_text):
    rec = parse("iperf3-json", fixture(fixture_text, "iperf3-J-3.0.11-error-no-route-to-host-issue545.json"))
    assert rec["ok"] is False
    assert rec["error"] == "error - unable to connect to server: No route to host"
    assert rec["version"] == "iperf 3.0.11" and rec["leading_text"] is None
    assert rec["sender"] is None and rec["receiver"] is None


def test_json_leading_ctrl_c_and_interrupt_error(fixture_text):
    rec = parse(
        "iperf3-json",
        fixture(fixture_text, "iperf3-J-client-interrupted-ctrl-c-leading-bytes-constructed.json"),
    )
    assert rec["leading_text"] == "^C"
    assert rec["ok"] is False and rec["error"] == "interrupt - the client has terminated"
    assert rec["sender"]["gbit_per_s"] == 23.22367 and rec["receiver"]["bytes"] == 6990888960
    assert rec["intervals"] == 2


def test_json_leading_warning_line_and_trailing_error_line():
    text = (
        "warning: JSON data length overflow\n"
        + iperf_json()
        + "\niperf3: error - unable to send control message: Broken pipe\n"
    )
    rec = parse("iperf3-json", text)
    assert rec["leading_text"] == "warning: JSON data length overflow"
    assert rec["ok"] is False and rec["error"] == "unable to send control message: Broken pipe"
    assert rec["sender"]["gbit_per_s"] == 92.5
    clean = parse("iperf3-json", "^C" + iperf_json())
    assert clean["ok"] is True and clean["leading_text"] == "^C"


def test_text_leading_text_that_is_not_a_timestamp_is_not_stripped():
    rec = parse(
        "iperf3",
        "\n".join("1: " + ln for ln in TCP_CLIENT_P2.splitlines())
        + "\n[  5]   0.00-1.00   sec  1.00 GBytes  8.59 Gbits/sec    0             sender\n"
          "[  5]   0.00-1.04   sec  1.00 GBytes  8.26 Gbits/sec                  receiver\n",
    )
    assert rec["timestamped"] is False and rec["sender"]["gbit_per_s"] == 8.59
