"""The console's doors, tried with a plain HTTP client against a live server: a session
only from a right key, sealed and HttpOnly; no change without the session's CSRF token
or from another site; a key's policy obeyed; another account's resources never shown;
S3's bucket named "console" still S3's. And (issue 25) with Chromium where a browser is
what is attacked: no sign-in from another site's page (login CSRF); a few wrong
sign-ins, then a wait; the cookie Secure behind a TLS-terminating proxy, and only the
configured proxy believed; a session that ends - signed out, its key disabled, the
operator key replaced - ends for every copy of its cookie."""

from __future__ import annotations

import http.server
import json
import re
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_console import CHROMIUM
from tests.harness import DockyardServer, free_port, run_cli


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    instance = DockyardServer(tmp_path_factory.mktemp("console") / "data").start()
    yield instance
    instance.stop()


def sign_in(server: DockyardServer, key: tuple[str, str]) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=server.endpoint, timeout=60)
    answer = client.post(
        "/console/signin",
        data={"kind": "key", "access_key_id": key[0], "secret_access_key": key[1]},
    )
    assert answer.status_code == 303, answer.text
    page = client.get("/console/jobs")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return client, found.group(1)


def job_form(csrf: str, name: str, output: str = "s3://dockyard-jobs/console") -> dict[str, str]:
    """The "Create training job" form as a browser posts it."""
    return {
        "csrf": csrf,
        "name": name,
        "instance_type": "ml.m5.xlarge",
        "count": "1",
        "keep_alive": "0",
        "plan": "",
        "max_runtime": "60",
        "code": "print('hi')",
        "output": output,
        "metric_name": "",
        "metric_regex": "",
    }


def test_a_session_comes_only_from_a_right_key(live: DockyardServer) -> None:
    client = httpx.Client(base_url=live.endpoint, timeout=60)
    # Signed out, every page sends the browser to sign in, and back afterwards.
    answer = client.get("/console/jobs?status=Completed")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/signin?next=/console/jobs%3Fstatus%3DCompleted"
    key = live.credentials()
    for wrong in ((key[0], "wrong"), ("AKIANOSUCHKEY0000000", key[1]), ("", "")):
        refused = client.post(
            "/console/signin",
            data={"kind": "key", "access_key_id": wrong[0], "secret_access_key": wrong[1]},
        )
        assert refused.status_code == 401 and "dockyard_console" not in refused.headers.get(
            "set-cookie", ""
        )
    refused = client.post("/console/signin", data={"kind": "operator", "operator_key": "guess"})
    assert refused.status_code == 401
    # A sign-in never sends the browser elsewhere.
    answer = client.post(
        "/console/signin?next=https://evil.example/",
        data={"kind": "key", "access_key_id": key[0], "secret_access_key": key[1]},
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/console/"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    # The cookie is sealed: neither the secret nor the key id is readable in it, and a
    # changed cookie is no session.
    value = client.cookies["dockyard_console"]
    assert key[1] not in value and key[0] not in value
    tampered = value[:-6] + ("A" if value[-6] != "A" else "B") + value[-5:]
    other = httpx.Client(
        base_url=live.endpoint, timeout=60, cookies={"dockyard_console": tampered}
    )
    assert other.get("/console/jobs").status_code == 303
    # Pages are never cached, and load nothing from elsewhere.
    page = client.get("/console/jobs")
    assert page.headers["cache-control"] == "no-store"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "http://" not in page.text.replace(live.endpoint, "") and "https://" not in page.text


def test_no_change_without_the_sessions_token_or_from_another_site(live: DockyardServer) -> None:
    client, csrf = sign_in(live, live.credentials())
    data = job_form(csrf, "csrf-check")
    for bad in ({**data, "csrf": ""}, {**data, "csrf": "forged"}):
        refused = client.post("/console/jobs/new", data=bad)
        assert refused.status_code == 403 and "another site" in refused.text
    refused = client.post(
        "/console/jobs/new", data=data, headers={"origin": "https://evil.example"}
    )
    assert refused.status_code == 403
    sagemaker = live.client()
    assert sagemaker.list_training_jobs(NameContains="csrf-check")["TrainingJobSummaries"] == []
    made = client.post("/console/jobs/new", data=data, headers={"origin": live.endpoint})
    assert made.status_code == 303 and made.headers["location"] == "/console/jobs/csrf-check"
    assert sagemaker.describe_training_job(TrainingJobName="csrf-check")["TrainingJobName"]


def test_a_keys_policy_and_account_hold_in_the_console(live: DockyardServer) -> None:
    account_id, stranger = live.new_account("console-stranger")
    # A key of that account that may only read.
    reader = live.new_key(
        account_id,
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": ["sagemaker:List*", "sagemaker:Describe*",
                                                    "logs:*", "servicequotas:*"],
                     "Resource": "*"}
                ],
            }
        ),
    )  # fmt: skip
    live.client("s3", key=stranger).create_bucket(Bucket="stranger-bucket")
    client, csrf = sign_in(live, reader)
    assert "No training jobs" in client.get("/console/jobs").text
    refused = client.post(
        "/console/jobs/new", data=job_form(csrf, "not-allowed", "s3://stranger-bucket/x")
    )
    assert refused.status_code == 400
    assert "AccessDeniedException" in refused.text
    assert "sagemaker:CreateTrainingJob" in refused.text
    # The development account's job is nobody else's.
    stranger_client, _ = sign_in(live, stranger)
    live.client().create_training_job(
        TrainingJobName="dev-only",
        AlgorithmSpecification={
            "TrainingImage": "python:3.11",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python", "-c", "print(1)"],
        },
        RoleArn="arn:aws:iam::123456789012:role/demo",
        OutputDataConfig={"S3OutputPath": "s3://dockyard-jobs/output"},
        ResourceConfig={"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 60},
    )
    page = stranger_client.get("/console/jobs/dev-only")
    assert page.status_code == 400 and "ResourceNotFound" in page.text
    assert "dev-only" not in stranger_client.get("/console/jobs").text
    # And an operator page is not an account's.
    assert stranger_client.get("/console/fleet").status_code == 403


def test_a_bucket_named_console_is_still_s3s(live: DockyardServer, tmp_path: Path) -> None:
    s3 = live.client("s3")
    s3.create_bucket(Bucket="console")
    s3.put_object(Bucket="console", Key="signin", Body=b"an object, not a page")
    assert s3.get_object(Bucket="console", Key="signin")["Body"].read() == b"an object, not a page"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="console")["Contents"]]
    assert keys == ["signin"]


def test_an_operator_takes_instances_out_of_service(live: DockyardServer) -> None:
    client = httpx.Client(base_url=live.endpoint, timeout=60)
    token = (live.data_dir / "operator.key").read_text().strip()
    client.post("/console/signin", data={"kind": "operator", "operator_key": token})
    page = client.get("/console/fleet")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert page.status_code == 200 and csrf is not None
    where = {"instance_type": "ml.g5.xlarge", "availability_zone": "us-east-1c"}
    done = client.post("/console/fleet", data={"csrf": csrf.group(1), "action": "start", **where})
    assert "4 instance(s) now Maintenance" in done.text
    fleet = {
        (row["instance_type"], row["availability_zone"], row["health"])
        for row in httpx.get(
            live.endpoint + "/_dockyard/fleet", headers={"x-dockyard-operator-key": token}
        ).json()["instances"]
    }
    assert ("ml.g5.xlarge", "us-east-1c", "Maintenance") in fleet
    back = client.post("/console/fleet", data={"csrf": csrf.group(1), "action": "end", **where})
    assert "4 instance(s) now Healthy" in back.text
    # An operator session is not an account's: its pages are the operator's only.
    assert client.get("/console/jobs").status_code == 403


def signed_in(server: DockyardServer, cookie: str, page: str = "/console/jobs") -> bool:
    """Whether a browser holding only this cookie is signed in (the page answers, rather
    than sending it to sign in)."""
    answer = httpx.get(
        server.endpoint + page, cookies={"dockyard_console": cookie}, follow_redirects=False
    )
    assert answer.status_code in (200, 303), answer.text
    return answer.status_code == 200


def test_a_copied_cookie_ends_with_its_sign_out(live: DockyardServer) -> None:
    """Issue 25: the cookie of a session signed out still worked, for its 12 hours
    (nothing was revoked server-side): one kept by a proxy, a shared machine or a
    stolen backup signed in again."""
    _, key = live.new_account("console-signout")
    client, csrf = sign_in(live, key)
    cookie = client.cookies["dockyard_console"]
    other, _ = sign_in(live, key)  # the same key in another browser
    assert signed_in(live, cookie)
    assert client.post("/console/signout", data={"csrf": csrf}).status_code == 303
    assert not signed_in(live, cookie)
    assert client.get("/console/jobs").status_code == 303
    # Only that session ended.
    assert signed_in(live, other.cookies["dockyard_console"])


def test_a_disabled_keys_sessions_end_for_good(live: DockyardServer) -> None:
    """Issue 25: a session signed in before `dockyard keys disable` worked again after
    `keys enable`; the docs say the key's sessions end."""
    _, key = live.new_account("console-disable")
    client, _ = sign_in(live, key)
    cookie = client.cookies["dockyard_console"]
    run_cli("keys", "disable", key[0], data_dir=live.data_dir)
    assert not signed_in(live, cookie)
    run_cli("keys", "enable", key[0], data_dir=live.data_dir)
    assert not signed_in(live, cookie)
    fresh, _ = sign_in(live, key)  # the key itself works again
    assert signed_in(live, fresh.cookies["dockyard_console"])
    run_cli("keys", "delete", key[0], data_dir=live.data_dir)
    assert not signed_in(live, fresh.cookies["dockyard_console"])


def test_an_operator_session_ends_with_its_operator_key(tmp_path: Path) -> None:
    """Issue 25: after `operator.key` was replaced and the server restarted, the old
    operator cookie still opened /console/fleet (it named "operator" and nothing of the
    key). Sessions are kept across a restart; an operator's holds the key's digest."""
    server = DockyardServer(tmp_path / "data").start()
    try:
        token = (server.data_dir / "operator.key").read_text().strip()
        operator = httpx.Client(base_url=server.endpoint, timeout=60)
        operator.post("/console/signin", data={"kind": "operator", "operator_key": token})
        cookie = operator.cookies["dockyard_console"]
        account, _ = sign_in(server, server.credentials())
        assert signed_in(server, cookie, "/console/fleet")
        server.stop()
        server.start()  # the same keys: every session goes on
        assert signed_in(server, cookie, "/console/fleet")
        assert signed_in(server, account.cookies["dockyard_console"])
        server.stop()
        (server.data_dir / "operator.key").write_text(secrets.token_urlsafe(32) + "\n")
        server.start()
        assert not signed_in(server, cookie, "/console/fleet")
        assert signed_in(server, account.cookies["dockyard_console"])
        rotated = (server.data_dir / "operator.key").read_text().strip()
        again = httpx.Client(base_url=server.endpoint, timeout=60)
        again.post("/console/signin", data={"kind": "operator", "operator_key": rotated})
        assert signed_in(server, again.cookies["dockyard_console"], "/console/fleet")
    finally:
        server.stop()


def from_address(server: DockyardServer, address: str) -> httpx.Client:
    """A client whose connections come from `address` (any 127.x.y.z is this host's)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=server.endpoint, timeout=60, transport=transport)


def sign_in_form(key: tuple[str, str]) -> dict[str, str]:
    return {"kind": "key", "access_key_id": key[0], "secret_access_key": key[1]}


@pytest.fixture
def attacker_site() -> Iterator[tuple[str, dict[str, bytes]]]:
    """Another site (http://localhost:PORT, not 127.0.0.1: another site to a browser):
    its pages are what the test puts in the dict."""
    pages: dict[str, bytes] = {}

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    port = free_port()
    site = http.server.ThreadingHTTPServer(("127.0.0.1", port), Pages)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{port}", pages
    finally:
        site.shutdown()
        site.server_close()


def test_another_sites_page_cannot_sign_the_browser_in(
    live: DockyardServer, attacker_site: tuple[str, dict[str, bytes]]
) -> None:
    """Login CSRF: the attacker's page posts the attacker's own key to the sign-in; the
    victim, later at the console, would be working in the attacker's account (their
    uploads, their code). The browser carries the attack out for real."""
    from playwright.sync_api import sync_playwright

    attacker_account, attacker_key = live.new_account("console-attacker")
    site, pages = attacker_site
    pages["/"] = (
        f'<form id="f" method="post" action="{live.endpoint}/console/signin">'
        '<input type="hidden" name="kind" value="key">'
        f'<input type="hidden" name="access_key_id" value="{attacker_key[0]}">'
        f'<input type="hidden" name="secret_access_key" value="{attacker_key[1]}">'
        '</form><script>document.getElementById("f").submit()</script>'
    ).encode()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_context().new_page()
            with page.expect_response(lambda r: r.url.startswith(live.endpoint)) as posted:
                page.goto(site + "/")
            assert posted.value.status == 403
            assert "another site" in page.content()
            # Later, the victim opens the console: signed in to nobody's account.
            page.goto(live.endpoint + "/console/jobs")
            assert "/console/signin" in page.url
            assert attacker_account not in page.content()
            cookies = page.context.cookies(live.endpoint)
            assert not [c for c in cookies if c["name"] == "dockyard_console"], cookies
        finally:
            browser.close()
    # The same sign-in from the console's own page works (Origin, or Referer, ours).
    client = httpx.Client(base_url=live.endpoint, timeout=60)
    for headers in ({"origin": live.endpoint}, {"referer": live.endpoint + "/console/signin"}):
        answer = client.post("/console/signin", data=sign_in_form(attacker_key), headers=headers)
        assert answer.status_code == 303, answer.text
    # Refused whatever says it is another site's: Origin (also "null", an opaque
    # origin), else Referer, else Sec-Fetch-Site.
    for headers in (
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"referer": "http://evil.example/page"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ):
        fresh = httpx.Client(base_url=live.endpoint, timeout=60)
        answer = fresh.post("/console/signin", data=sign_in_form(attacker_key), headers=headers)
        assert answer.status_code == 403, headers
        assert "dockyard_console" not in answer.headers.get("set-cookie", "")


def test_a_few_wrong_sign_ins_then_a_wait(live: DockyardServer) -> None:
    key = live.credentials()
    # From one address: wrong keys (made-up ids), then even the right key waits.
    guesser = from_address(live, "127.0.0.2")
    for n in range(5):
        wrong = {"kind": "key", "access_key_id": f"AKIAGUESS{n:011d}", "secret_access_key": "x"}
        assert guesser.post("/console/signin", data=wrong).status_code == 401
    refused = guesser.post("/console/signin", data=sign_in_form(key))
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "Too many wrong sign-ins from this address" in refused.text
    assert "dockyard_console" not in refused.headers.get("set-cookie", "")
    # An X-Forwarded-For from a client that is no configured proxy changes nothing.
    spoofed = guesser.post(
        "/console/signin", data=sign_in_form(key), headers={"x-forwarded-for": "10.1.2.3"}
    )
    assert spoofed.status_code == 429
    # Another address is not held up by it.
    other = from_address(live, "127.0.0.3")
    assert other.post("/console/signin", data=sign_in_form(key)).status_code == 303
    # One key guessed at from many addresses: the key waits, wherever from.
    account_id, victim = live.new_account("console-guessed")
    for n in range(5):
        client = from_address(live, f"127.0.1.{n + 1}")
        wrong = {**sign_in_form(victim), "secret_access_key": "wrong"}
        assert client.post("/console/signin", data=wrong).status_code == 401
    refused = from_address(live, "127.0.2.1").post("/console/signin", data=sign_in_form(victim))
    assert refused.status_code == 429 and "from this key" in refused.text
    # The limit is the console's sign-in: the key itself still works for the API.
    assert live.client(key=victim).list_training_jobs()["TrainingJobSummaries"] == []
    # The operator key too (an earlier test's wrong guess counts: it is the same key).
    wrong_operator = {"kind": "operator", "operator_key": "guess"}
    answers = [
        from_address(live, "127.0.3.1").post("/console/signin", data=wrong_operator)
        for _ in range(6)
    ]
    assert {a.status_code for a in answers} == {401, 429} and answers[-1].status_code == 429


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    """A server behind a TLS-terminating proxy at 127.0.0.2 (`--forwarded-allow-ips`)."""
    instance = DockyardServer(tmp_path_factory.mktemp("proxied") / "data")
    instance.extra_args = ["--forwarded-allow-ips", "127.0.0.2"]
    yield instance.start()
    instance.stop()


def test_the_cookie_is_secure_behind_a_tls_proxy(behind_proxy: DockyardServer) -> None:
    server = behind_proxy
    key = server.credentials()
    # Through the proxy, a browser on https: the cookie is only ever sent over https.
    proxy = from_address(server, "127.0.0.2")
    answer = proxy.post(
        "/console/signin",
        data=sign_in_form(key),
        headers={"x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.7"},
    )
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert "; secure" in cookie.lower() and "HttpOnly" in cookie, cookie
    # Signing out clears it with the same attributes. (This client speaks http to the
    # server, as the proxy does, so it is handed the cookie the browser would send.)
    browser = from_address(server, "127.0.0.2")
    browser.cookies.set("dockyard_console", answer.cookies["dockyard_console"])
    page = browser.get("/console/jobs", headers={"x-forwarded-proto": "https"})
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    out = browser.post(
        "/console/signout", data={"csrf": csrf.group(1)}, headers={"x-forwarded-proto": "https"}
    )
    assert out.status_code == 303 and "; secure" in out.headers["set-cookie"].lower()
    # Straight to the server over http (no proxy): not Secure, or it would never be sent.
    direct = from_address(server, "127.0.0.4")
    answer = direct.post("/console/signin", data=sign_in_form(key))
    assert answer.status_code == 303 and "; secure" not in answer.headers["set-cookie"].lower()
    # Any other client saying it came over https, or from elsewhere, is not believed:
    # not 127.0.0.1 either (uvicorn's default would believe any local process).
    for address in ("127.0.0.1", "127.0.0.4"):
        liar = from_address(server, address)
        answer = liar.post(
            "/console/signin", data=sign_in_form(key), headers={"x-forwarded-proto": "https"}
        )
        assert "; secure" not in answer.headers["set-cookie"].lower(), address
        for n in range(5):
            liar.post(
                "/console/signin",
                data={
                    "kind": "key",
                    "access_key_id": f"AKIALIAR{n:012d}",
                    "secret_access_key": "",
                },
                headers={"x-forwarded-for": f"198.51.100.{n}"},
            )
        # ... so its wrong sign-ins were its own, whatever it claimed to be.
        held = liar.post(
            "/console/signin", data=sign_in_form(key), headers={"x-forwarded-for": "192.0.2.1"}
        )
        assert held.status_code == 429, address
    # While the proxy's clients are told apart by what the proxy says of them.
    for n in range(5):
        proxy.post(
            "/console/signin",
            data={"kind": "key", "access_key_id": f"AKIAPROXY{n:011d}", "secret_access_key": "x"},
            headers={"x-forwarded-for": "203.0.113.8"},
        )
    held = proxy.post(
        "/console/signin", data=sign_in_form(key), headers={"x-forwarded-for": "203.0.113.8"}
    )
    assert held.status_code == 429
    other = proxy.post(
        "/console/signin", data=sign_in_form(key), headers={"x-forwarded-for": "203.0.113.9"}
    )
    assert other.status_code == 303
