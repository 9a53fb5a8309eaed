#!/usr/bin/python3
"""Fetch one URL of rmqlua's metrics endpoint and print what came back as one JSON object:
{"status", "content_type", "body"} and, for /metrics, "families": {name: {"type", "help",
"samples": [{"name", "labels", "value"}]}} as parsed by the Prometheus text-format parser of
python3-prometheus-client (Debian), so that a format error fails the spec (exit 3, naming it).
Exit 4 when the endpoint cannot be reached.

Usage: /usr/bin/python3 spec/python/prom_scrape.py http://127.0.0.1:PORT/metrics
"""
import json
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    url = sys.argv[1]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    try:
        with opener.open(url, timeout=10) as r:
            status, ctype, body = r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        status, ctype, body = e.code, e.headers.get("Content-Type", ""), e.read()
    except (urllib.error.URLError, OSError) as e:
        print("cannot reach %s: %s" % (url, e), file=sys.stderr)
        return 4
    text = body.decode("utf-8")
    out = {"status": status, "content_type": ctype, "body": text}
    if url.endswith("/metrics") and status == 200:
        families = {}
        try:
            for f in text_string_to_metric_families(text):
                if f.name in families:
                    raise ValueError("family %s appears twice" % f.name)
                families[f.name] = {
                    "type": f.type,
                    "help": f.documentation,
                    "samples": [{"name": s.name, "labels": s.labels, "value": s.value}
                                for s in f.samples],
                }
        except Exception as e:  # the parser raises ValueError and others on bad input
            print("exposition format error: %s" % e, file=sys.stderr)
            return 3
        out["families"] = families
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
