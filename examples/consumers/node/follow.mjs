#!/usr/bin/env node
// Follow faultstream's verdicts and remediations from Node.js (kafkajs), keeping the current
// state of every verdict and every remediation action, as a downstream system would.
//
//   npm ci
//   node follow.mjs --bootstrap 127.0.0.1:9092 [--prefix faultstream] [--group my-app]
//                   [--from-beginning] [--idle-exit-s 10]
//
// Topics: <prefix>.attributions (key: attribution_id) and <prefix>.remediations (key:
// action_id), both compacted: read from the beginning, they give the current state of every
// key; a record with a null value (a tombstone) says the entity ended (a withdrawn verdict).
//
// What a consumer must know (README, "Consuming faultstream's topics"):
// * Keep the latest record per key: the highest `revision` of an attribution, the highest
//   `sequence` of a remediation action. A duplicate or a late older record is ignored.
// * Times are integers of UTC nanoseconds, above 2**53: JSON.parse would round them. This
//   consumer reads the RFC 3339 twin of each time (`decided_at_utc`, `updated_at_utc`) and
//   parses the value with lossless-json, integers beyond 2**53 as BigInt.
//
// Output, one line per change of the state (fields separated by one space):
//   attribution <attribution_id> rev <revision> <status> <root cause code or -> decided <decided_at_utc> scope <kind> <cluster>/<id>
//   attribution <attribution_id> ended
//   remediation <action_id> seq <sequence> <state> <action> <target host or port or -> updated <updated_at_utc>
//   remediation <action_id> ended
// and when it stops (SIGINT, SIGTERM, or --idle-exit-s seconds without a record):
//   summary attributions <verdicts held> remediations <actions held>
// Exit status 0 after a clean stop, 1 when Kafka fails, 2 for bad arguments.

import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';

import kafkajs from 'kafkajs';
import { parse, parseNumberAndBigInt } from 'lossless-json';

const { Kafka, logLevel } = kafkajs;

/** Current state: key -> latest record, per topic. */
const verdicts = new Map();
const actions = new Map();

/** The record value parsed without rounding: integers beyond 2**53 become BigInt. */
function decode(buffer) {
  return parse(buffer.toString('utf8'), null, parseNumberAndBigInt);
}

function show(text) {
  return text === null || text === undefined || text === '' ? '-' : String(text).replaceAll(/\s/g, '_');
}

/** Apply one attributions record; returns the line to print, or null when nothing changed. */
function onAttribution(key, value) {
  if (value === null) {
    return verdicts.delete(key) ? `attribution ${key} ended` : null;
  }
  const verdict = decode(value);
  const held = verdicts.get(key);
  if (held && held.revision >= verdict.revision) return null; // a duplicate or an older revision
  verdicts.set(key, verdict);
  // v1 records had `final`; contract v2 has `status`
  const status = verdict.status ?? (verdict.final ? 'final' : 'provisional');
  const scope = verdict.scope;
  return `attribution ${key} rev ${verdict.revision} ${status} ${show(verdict.root_cause?.code)} `
    + `decided ${verdict.decided_at_utc} scope ${scope.kind} ${show(scope.cluster)}/${scope.id}`;
}

/** Apply one remediations record; returns the line to print, or null when nothing changed. */
function onRemediation(key, value) {
  if (value === null) {
    return actions.delete(key) ? `remediation ${key} ended` : null;
  }
  const action = decode(value);
  const held = actions.get(key);
  if (held && held.sequence >= action.sequence) return null; // a duplicate or an older transition
  actions.set(key, action);
  const target = action.target.host ?? action.target.port ?? null;
  return `remediation ${key} seq ${action.sequence} ${action.state} ${action.action} ${show(target)} `
    + `updated ${action.updated_at_utc}`;
}

async function main() {
  let args;
  try {
    ({ values: args } = parseArgs({
      options: {
        bootstrap: { type: 'string', default: process.env.KAFKA_BOOTSTRAP_SERVERS ?? '127.0.0.1:9092' },
        prefix: { type: 'string', default: process.env.FAULTSTREAM_TOPIC_PREFIX || 'faultstream' },
        group: { type: 'string', default: `faultstream-follow-${randomUUID()}` },
        'from-beginning': { type: 'boolean', default: false },
        'idle-exit-s': { type: 'string' },
      },
      strict: true,
    }));
  } catch (err) {
    process.stderr.write(`follow: ${err.message}\n`);
    return 2;
  }
  const idleExitMs = args['idle-exit-s'] === undefined ? null : Number(args['idle-exit-s']) * 1000;
  if (idleExitMs !== null && !(idleExitMs > 0)) {
    process.stderr.write('follow: --idle-exit-s: a positive number of seconds\n');
    return 2;
  }
  const topics = { [`${args.prefix}.attributions`]: onAttribution, [`${args.prefix}.remediations`]: onRemediation };

  const kafka = new Kafka({
    clientId: 'faultstream-follow',
    brokers: args.bootstrap.split(','),
    logLevel: logLevel.WARN,
  });
  const consumer = kafka.consumer({ groupId: args.group });
  let lastRecord = Date.now();
  let exitCode = 0;
  let stopping = null;
  let stopped;
  const done = new Promise((resolve) => { stopped = resolve; });
  const stop = () => {
    stopping ??= consumer.disconnect().catch(() => {}).then(() => {
      process.stdout.write(`summary attributions ${verdicts.size} remediations ${actions.size}\n`);
      stopped();
    });
    return stopping;
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  // the idle clock starts when the group has assigned the partitions
  consumer.on(consumer.events.GROUP_JOIN, () => { lastRecord = Date.now(); });
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    if (!payload.restart) {
      process.stderr.write(`follow: the consumer stopped: ${payload.error}\n`);
      exitCode = 1;
      stop();
    }
  });

  await consumer.connect();
  await consumer.subscribe({ topics: Object.keys(topics), fromBeginning: args['from-beginning'] });
  await consumer.run({
    eachMessage: async ({ topic, message }) => {
      lastRecord = Date.now();
      const line = topics[topic](message.key.toString('utf8'), message.value);
      if (line !== null) process.stdout.write(`${line}\n`);
    },
  });
  if (idleExitMs !== null) {
    const timer = setInterval(() => {
      if (Date.now() - lastRecord >= idleExitMs) stop();
    }, 200);
    done.then(() => clearInterval(timer));
  }
  await done;
  return exitCode;
}

main().then(
  (code) => { process.exitCode = code; },
  (err) => {
    process.stderr.write(`follow: ${err && err.stack ? err.stack : err}\n`);
    process.exitCode = 1;
  },
);
