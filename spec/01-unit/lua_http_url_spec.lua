-- rmq.http's url parsing: scheme, host (IPv6 in brackets), port (the scheme's default), the
-- path with its query (a fragment dropped), the Host header's value; a bad url is an error
-- string naming it and what is wrong.
local helpers = require "helpers"
helpers.lib()
local parse = require("rmq.http")._parse_url

describe("rmq.http url parsing", function()
  it("splits a url into scheme, host, port, path and the Host header's value", function()
    assert.same({ scheme = "http", host = "10.0.0.7", port = 8080, path = "/a/b?x=1&y=2",
      authority = "10.0.0.7:8080" }, parse("http://10.0.0.7:8080/a/b?x=1&y=2#frag"))
    assert.same({ scheme = "https", host = "example.com", port = 443, path = "/",
      authority = "example.com" }, parse("HTTPS://example.com"))
    assert.same({ scheme = "http", host = "h", port = 80, path = "/?q", authority = "h" },
      parse("http://h?q"))
    assert.same({ scheme = "http", host = "::1", port = 9000, path = "/", authority = "[::1]:9000" },
      parse("http://[::1]:9000/"))
    assert.same({ scheme = "https", host = "h", port = 80, path = "/", authority = "h:80" },
      parse("https://h:80/"))
  end)

  it("names what is wrong with a bad url", function()
    local cases = {
      { 42, "bad url: expected a string, got number" },
      { "h/x", "bad url 'h/x': no scheme (http:// or https://)" },
      { "ftp://h/", "bad url 'ftp://h/': scheme ftp is not http or https" },
      { "http:///x", "bad url 'http:///x': no host" },
      { "http://h:0/", "bad url 'http://h:0/': bad port" },
      { "http://h:x/", "bad url 'http://h:x/': bad port" },
      { "http://[::1/", "bad url 'http://[::1/': bad IPv6 address" },
      { "http://a@h/", "bad url 'http://a@h/': user info (user@) is not supported" },
      { "http://h/a b", "bad url 'http://h/a b': spaces or control characters in the path" },
    }
    for _, c in ipairs(cases) do
      assert.same({ nil, c[2] }, { parse(c[1]) })
    end
  end)
end)
