import { describe, expect, it } from "vitest";
import { webhookUrlProblem } from "../../src/webhooks/url";

const production = { allowHttp: false, selfHosts: ["gpulease.example.workers.dev"] };
const dev = { allowHttp: true, selfHosts: ["127.0.0.1:8787"] };

describe("webhook URLs in production", () => {
  it.each([
    "https://hooks.slack.com/services/T000/B000/XXXX",
    "https://example.com:8443/hook?x=1",
    "https://[2606:4700::1111]/hook",
    "https://[64:ff9b::808:808]/hook", // NAT64 of a public address
    "https://[2002:808:808::1]/hook", // 6to4 of a public address
    "https://example.com./hook",
  ])("accepts %s", (url) => {
    expect(webhookUrlProblem(url, production)).toBeNull();
  });

  it.each([
    ["http://example.com/hook", /https:\/\//],
    ["ftp://example.com/hook", /https:\/\//],
    ["not a url", /valid URL/],
    ["https://user:pass@example.com/hook", /user name or password/],
    ["https://gpulease.example.workers.dev/v1/leases", /this worker/],
    ["https://127.0.0.1/hook", /loopback, private/],
    ["https://127.1/hook", /loopback, private/], // the URL parser widens short IPv4 forms
    ["https://2130706433/hook", /loopback, private/],
    ["https://10.1.2.3/hook", /loopback, private/],
    ["https://172.20.0.1/hook", /loopback, private/],
    ["https://192.168.1.10/hook", /loopback, private/],
    ["https://169.254.169.254/latest/meta-data", /loopback, private/],
    ["https://100.64.0.1/hook", /loopback, private/],
    ["https://0.0.0.0/hook", /loopback, private/],
    ["https://[::1]/hook", /loopback, private/],
    ["https://[::ffff:127.0.0.1]/hook", /loopback, private/],
    ["https://[fd00::1]/hook", /loopback, private/],
    ["https://[fe80::1]/hook", /loopback, private/],
    ["https://localhost/hook", /loopback, private/],
    ["https://printer.local/hook", /loopback, private/],
    ["https://db.internal/hook", /loopback, private/],
    // Spellings that name the same places: IPv4 inside IPv6, and the DNS root's trailing dot.
    ["https://[::127.0.0.1]/hook", /loopback, private/], // IPv4-compatible (::7f00:1)
    ["https://[::169.254.169.254]/hook", /loopback, private/],
    ["https://[::ffff:0:127.0.0.1]/hook", /loopback, private/], // IPv4-translated
    ["https://[64:ff9b::a9fe:a9fe]/latest/meta-data", /loopback, private/], // NAT64 of 169.254.169.254
    ["https://[64:ff9b::10.0.0.1]/hook", /loopback, private/],
    ["https://[64:ff9b:1::a00:1]/hook", /loopback, private/], // local-use NAT64
    ["https://[2002:7f00:1::]/hook", /loopback, private/], // 6to4 of 127.0.0.1
    ["https://[2002:a9fe:a9fe::1]/hook", /loopback, private/],
    ["https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", /loopback, private/], // Teredo, client 127.0.0.1
    ["https://[ff02::1]/hook", /loopback, private/], // multicast
    ["https://localhost./hook", /loopback, private/],
    ["https://LOCALHOST../hook", /loopback, private/],
    ["https://metadata.google.internal./computeMetadata/v1/", /loopback, private/],
    ["https://127.0.0.1./hook", /loopback, private/],
    ["https://gpulease.example.workers.dev./v1/leases", /this worker/],
    ["https://GPULEASE.example.workers.dev.:443/v1/leases", /this worker/],
  ])("refuses %s", (url, why) => {
    expect(webhookUrlProblem(url, production)).toMatch(why);
  });
});

describe("webhook URLs with ALLOW_HTTP_WEBHOOKS=true", () => {
  it("accepts http:// and loopback receivers", () => {
    expect(webhookUrlProblem("http://127.0.0.1:9999/hook", dev)).toBeNull();
    expect(webhookUrlProblem("http://localhost:9999/hook", dev)).toBeNull();
  });

  it("still refuses the worker itself and other schemes", () => {
    expect(webhookUrlProblem("http://127.0.0.1:8787/v1/leases", dev)).toMatch(/this worker/);
    expect(webhookUrlProblem("http://127.0.0.1.:8787/v1/leases", dev)).toMatch(/this worker/);
    expect(webhookUrlProblem("file:///etc/passwd", dev)).toMatch(/http:\/\/ or https:\/\//);
  });
});
