'use strict';
// ali-ons clustering push consumer. Options (JSON argv[2]):
//   namesrv, topic, group, sub ('*' or 'TagA || TagB'), expect (number of distinct keys to wait
//   for), retry (array of first keys, e.g. ["k3"], to answer RECONSUME_LATER on first delivery),
//   timeout (ms).
// Prints one JSON line per delivery: {topic, tags, keys, first_key, reconsumeTimes, queueId,
// queueOffset, msgId, uniq_key, retry_topic, props, body, body_len, body_sha1}, then
// {"done": true} and exits 0 once every expected key was seen and every retried key came back;
// exits 1 on timeout.
const { Consumer } = require('ali-ons');
const { parseArgs, clientOptions, sha1, emit, finish } = require('./common');

async function main() {
  const opts = parseArgs();
  const retry = new Set(opts.retry || []);
  const seen = new Set();
  const retried = new Set();
  const consumer = new Consumer(Object.assign(clientOptions(opts), {
    consumerGroup: opts.group,
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
  }));
  consumer.on('error', err => process.stderr.write('consumer error: ' + err.message + '\n'));

  let finished = false;
  const done = code => {
    if (finished) return;
    finished = true;
    if (code === 0) emit({ done: true });
    finish(code, [ consumer ]);
  };
  const check = () => {
    if (seen.size >= opts.expect && retried.size >= retry.size) done(0);
  };
  setTimeout(() => {
    process.stderr.write(`consume timed out: seen ${seen.size}/${opts.expect}, retried ${retried.size}/${retry.size}\n`);
    done(1);
  }, opts.timeout || 30000);

  consumer.subscribe(opts.topic, opts.sub || '*', async msg => {
    const props = Object.assign({}, msg.properties);
    const keys = msg.keys || '';
    const firstKey = keys.split(' ')[0];
    const body = msg.body || Buffer.alloc(0);
    emit({ topic: msg.topic, tags: msg.tags, keys, first_key: firstKey, reconsumeTimes: msg.reconsumeTimes,
      queueId: msg.queueId, queueOffset: msg.queueOffset, msgId: msg.msgId, uniq_key: props.UNIQ_KEY,
      retry_topic: props.RETRY_TOPIC, props, body: body.length <= 256 ? body.toString() : null,
      body_len: body.length, body_sha1: sha1(body) });
    if (retry.has(firstKey) && msg.reconsumeTimes === 0 && !retried.has(firstKey)) {
      return Consumer.ACTION_RETRY;
    }
    if (retry.has(firstKey) && msg.reconsumeTimes > 0) retried.add(firstKey);
    seen.add(firstKey);
    setImmediate(check);
    return undefined;
  });
}

main();
