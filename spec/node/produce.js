'use strict';
// ali-ons producer. Options (JSON argv[2]):
//   namesrv, topic, count, group?, large? (index of the message that gets a compressed body > 4 KiB)
// Message i has keys "k<i> kk<i>", tags TagA (even i) or TagB (odd i), body "body-<i>" (or a
// 6000-byte body for the large one), and user property idx=<i>.
// Prints one JSON line per message sent: {i, keys, tags, msgId, queueId, queueOffset, status,
// body_len, body_sha1}, then {"done": n}. Exit 0 when all were sent.
const { Producer, Message } = require('ali-ons');
const { parseArgs, clientOptions, sha1, emit, finish } = require('./common');

function largeBody(i) {
  let s = '';
  while (s.length < 6000) s += 'large-body-' + i + '-' + s.length + ';';
  return Buffer.from(s.slice(0, 6000));
}

async function main() {
  const opts = parseArgs();
  const producer = new Producer(Object.assign(clientOptions(opts), {
    producerGroup: opts.group || 'ons_interop_producer',
  }));
  producer.on('error', err => process.stderr.write('producer error: ' + err.message + '\n'));
  let code = 0;
  try {
    await producer.ready();
    for (let i = 0; i < opts.count; i++) {
      const tags = i % 2 === 0 ? 'TagA' : 'TagB';
      const body = i === opts.large ? largeBody(i) : Buffer.from('body-' + i);
      const msg = new Message(opts.topic, tags, body);
      msg.keys = [ 'k' + i, 'kk' + i ];
      msg.properties.idx = String(i);
      const r = await producer.send(msg);
      emit({ i, keys: msg.keys, tags, msgId: r.msgId, queueId: r.messageQueue ? Number(r.messageQueue.queueId) : null,
        queueOffset: r.queueOffset, status: r.sendStatus, body_len: body.length, body_sha1: sha1(body) });
    }
    emit({ done: opts.count });
  } catch (err) {
    process.stderr.write('produce failed: ' + (err && err.stack || err) + '\n');
    code = 1;
  }
  await finish(code, [ producer ]);
}

main();
