'use strict';
// Shared set-up for the interop scripts: options for a plain name server on loopback, quiet
// logging, short timers (ali-ons timers are not unref'd), and an explicit exit.
const crypto = require('crypto');

function parseArgs() {
  const raw = process.argv[2];
  if (!raw) {
    process.stderr.write('usage: node ' + process.argv[1] + " '<json options>'\n");
    process.exit(2);
  }
  return JSON.parse(raw);
}

const quietLogger = {
  debug() {}, info() {}, warn() {},
  error(...args) { process.stderr.write('ali-ons: ' + args.map(String).join(' ') + '\n'); },
};

// opts.access_key / opts.secret_key: ali-ons signs every request (its accessKeyId /
// accessKeySecret options).
function clientOptions(opts) {
  const acl = opts.access_key ? { accessKeyId: opts.access_key, accessKeySecret: opts.secret_key } : {};
  return Object.assign(acl, {
    nameSrv: opts.namesrv,
    httpclient: {}, // asserted non-null, never used when nameSrv is set
    clientIP: '127.0.0.1',
    logger: quietLogger,
    pollNameServerInteval: 1000,
    heartbeatBrokerInterval: 1000,
    rebalanceInterval: 1000,
    persistConsumerOffsetInterval: 1000,
  });
}

function sha1(buf) {
  return crypto.createHash('sha1').update(buf || Buffer.alloc(0)).digest('hex');
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// Close everything we can, then exit: timers of the internal producer would keep node alive.
async function finish(code, clients) {
  const { Producer } = require('ali-ons');
  const all = clients.slice();
  if (Producer.defaultProducer) all.push(Producer.defaultProducer);
  const timer = setTimeout(() => process.exit(code), 3000);
  for (const c of all) {
    try { await c.close(); } catch (err) { /* closing is best effort */ }
  }
  clearTimeout(timer);
  process.exit(code);
}

module.exports = { parseArgs, clientOptions, sha1, emit, finish };
