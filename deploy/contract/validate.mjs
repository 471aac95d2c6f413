#!/usr/bin/env node
// Validate records read from faultstream's topics as a consumer in another language would:
// JSON Schema (draft 2020-12) with ajv + ajv-formats, numbers read losslessly.
//
//   node deploy/contract/validate.mjs [--asyncapi schemas/asyncapi.yaml] [--schemas schemas/json]
//        [--prefix faultstream] [--max-failures N] [FILE|-]
//
// Input: JSON lines (FILE, or stdin when FILE is absent or "-"), one record each:
//
//   {"topic": "faultstream.attributions", "key": "att-…", "value": <the value>,
//    "headers": {"schema": "…", …} | [["schema", "…"], …], "partition": 3, "offset": 17}
//
// `value` is the record value as JSON text (a string, parsed here), the value itself
// embedded as JSON, or null for a tombstone. `headers` values are strings (null for a header
// without value). `partition` and `offset` are optional and only echoed in failures.
//
// For each record:
// * its topic is mapped to a channel of the AsyncAPI document (parsed with @asyncapi/parser):
//   the topic without `<prefix>.` is the channel address without its first dotted part
//   (`t-1.attributions` with --prefix t-1 -> channel address `faultstream.attributions`);
//   the channel's message payload (a component schema, e.g. `Attribution`) names the JSON
//   Schema file of schemas/json with that `title`;
// * the value is parsed with lossless-json (every number kept as its exact decimal text;
//   duplicate keys rejected), validated with ajv (draft 2020-12, all formats of ajv-formats,
//   `contentEncoding: base64` asserted as standard base64, RFC 4648 section 4);
// * every string field `<name>_utc` is compared with its integer twin `<name>` (or
//   `<name>_ns`): the RFC 3339 UTC text with nine fractional digits of the exact integer,
//   computed with BigInt (a double would round any time after 1970-04-15 in nanoseconds);
// * the headers `schema`, `schema_version` and `content-type` must each be present once;
//   `schema_version` must equal the value's `schema_version`, `content-type` must be
//   `application/json`; when the AsyncAPI message declares a headers schema, the headers are
//   validated against it too. Tombstones are checked for headers only.
//
// Output (stdout): one JSON object
//   {"ok": bool, "records": N, "failed": N,
//    "topics": {"<topic>": {"channel", "schema_file", "schema_version_const", "records",
//               "valid", "invalid", "tombstones", "twins_checked", "twin_fields": [...],
//               "unsafe_integers", "headers": {"schema": [values seen], ...}}},
//    "failures": [{"topic", "partition", "offset", "key", "errors": ["…"]}]}
// Exit status 0 when every record passes, 1 when any fails (the failures list them), 2 when
// the arguments, the AsyncAPI document or the schema files are unusable.

import { createReadStream } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';

import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { isLosslessNumber, parse as parseLossless } from 'lossless-json';

import {
  DEFAULT_ASYNCAPI, DEFAULT_SCHEMAS, channelsBySuffix, parseAsyncApi, rfc3339FromNs, schemaFiles,
} from './contract.mjs';

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;

/** The headers every record of every public topic carries (contract v2, item 5). */
const REQUIRED_HEADERS = ['schema', 'schema_version', 'content-type'];
const CONTENT_TYPE = 'application/json';
const STANDARD_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const URL_BASE64 = /^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2}(?:==)?|[A-Za-z0-9_-]{3}=?)?$/;
const INTEGER = /^-?\d+$/;

class UsageError extends Error {}

/** An ajv instance for draft 2020-12 with every format and `contentEncoding` asserted. */
function makeAjv() {
  const ajv = new Ajv2020({ allErrors: true });
  addFormats(ajv);
  // draft 2020-12 makes contentEncoding an annotation; a consumer that decodes the bytes
  // relies on it, so it is checked here
  ajv.removeKeyword('contentEncoding');
  ajv.addKeyword({
    keyword: 'contentEncoding',
    type: 'string',
    schemaType: 'string',
    error: { message: (cxt) => `must be ${cxt.schema} text` },
    validate: (encoding, data) => {
      if (encoding === 'base64') return STANDARD_BASE64.test(data);
      if (encoding === 'base64url') return URL_BASE64.test(data);
      return true;
    },
  });
  return ajv;
}

/** The lossless tree with every number as a JS number (what ajv's type checks need). */
function toPlain(value) {
  if (isLosslessNumber(value)) return Number(value.value);
  if (Array.isArray(value)) return value.map(toPlain);
  if (value !== null && typeof value === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = toPlain(v);
    return out;
  }
  return value;
}

/** Walk a lossless tree: check every `<name>_utc` against its integer twin. */
function checkTwins(value, where, found, errors, stats) {
  if (Array.isArray(value)) {
    value.forEach((item) => checkTwins(item, `${where}[]`, found, errors, stats));
    return;
  }
  if (isLosslessNumber(value)) {
    if (INTEGER.test(value.value) && !Number.isSafeInteger(Number(value.value))) stats.unsafe += 1;
    return;
  }
  if (value === null || typeof value !== 'object') return;
  for (const [name, text] of Object.entries(value)) {
    const field = where ? `${where}.${name}` : name;
    if (name.endsWith('_utc')) {
      const base = name.slice(0, -4);
      const twin = base in value ? base : `${base}_ns`;
      const ns = value[twin];
      const at = where ? `${where}.${twin}` : twin;
      if (!(twin in value)) {
        errors.push(`/${field.replaceAll('.', '/')}: has no integer twin ${base} or ${base}_ns`);
      } else if (ns === null || text === null) {
        if (ns !== text) errors.push(`/${field.replaceAll('.', '/')}: ${JSON.stringify(text)} but ${at} is ${ns === null ? 'null' : ns.value}`);
        else found.add(at);
      } else if (!isLosslessNumber(ns) || !INTEGER.test(ns.value)) {
        errors.push(`/${at.replaceAll('.', '/')}: the twin of ${name} is not an integer`);
      } else {
        const want = rfc3339FromNs(BigInt(ns.value));
        if (text !== want) {
          errors.push(`/${field.replaceAll('.', '/')}: ${JSON.stringify(text)} is not ${at}=${ns.value} `
            + `(${want === null ? 'outside years 0000..9999' : want})`);
        } else {
          found.add(at);
          stats.twins += 1;
        }
      }
    }
    if (text !== null && typeof text === 'object') checkTwins(text, field, found, errors, stats);
    else if (isLosslessNumber(text)) checkTwins(text, field, found, errors, stats);
  }
}

/** Headers as [[name, value], ...] from an object or a list of pairs. */
function headerPairs(headers) {
  if (headers === undefined || headers === null) return [];
  if (Array.isArray(headers)) return headers.map(([k, v]) => [String(k), v === null ? null : String(v)]);
  return Object.entries(headers).map(([k, v]) => [k, v === null ? null : String(v)]);
}

function readLines(file) {
  const input = !file || file === '-' ? process.stdin : createReadStream(file, { encoding: 'utf8' });
  return createInterface({ input, crlfDelay: Infinity });
}

async function main() {
  const { values, positionals } = parseArgs({
    options: {
      asyncapi: { type: 'string', default: DEFAULT_ASYNCAPI },
      schemas: { type: 'string', default: DEFAULT_SCHEMAS },
      prefix: { type: 'string' },
      'max-failures': { type: 'string', default: '1000' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (positionals.length > 1) throw new UsageError('at most one input file');
  const maxFailures = Number.parseInt(values['max-failures'], 10);
  if (!(maxFailures >= 0)) throw new UsageError('--max-failures: a non-negative integer');

  const { document, diagnostics, errors } = await parseAsyncApi(values.asyncapi);
  if (!document || errors > 0) {
    throw new UsageError(`${values.asyncapi} does not parse: ${JSON.stringify(diagnostics.filter((d) => d.severity === 'error'))}`);
  }
  const channels = channelsBySuffix(document);
  const files = schemaFiles(values.schemas);
  const ajv = makeAjv();
  // AsyncAPI schema objects may carry keywords of their own (x-parser-schema-id, discriminator, ...)
  const ajvAsyncApi = new Ajv2020({ allErrors: true, strict: false });
  addFormats(ajvAsyncApi);
  const validators = new Map(); // schema file -> compiled
  const headerValidators = new Map(); // channel -> compiled | null

  const topics = {};
  const failures = [];
  let records = 0;
  let failed = 0;

  function topicState(topic) {
    if (topics[topic]) return topics[topic];
    let suffix = topic;
    if (values.prefix !== undefined) {
      if (!topic.startsWith(`${values.prefix}.`)) throw new UsageError(`topic ${topic} does not start with ${values.prefix}.`);
      suffix = topic.slice(values.prefix.length + 1);
    } else {
      const dot = topic.indexOf('.');
      suffix = dot >= 0 ? topic.slice(dot + 1) : topic;
    }
    const channel = channels.get(suffix);
    const state = {
      summary: {
        channel: channel ? channel.channel : null,
        schema_file: null,
        schema_version_const: null,
        records: 0, valid: 0, invalid: 0, tombstones: 0,
        twins_checked: 0, twin_fields: [], unsafe_integers: 0,
        headers: {},
      },
      problem: null, validate: null, headers: null, fields: new Set(),
    };
    if (!channel) state.problem = `no channel of ${values.asyncapi} has the address <prefix>.${suffix}`;
    else if (channel.messages.length !== 1) state.problem = `channel ${channel.channel} declares ${channel.messages.length} messages, expected 1`;
    else {
      const message = channel.messages[0];
      const file = message.payload ? files.get(message.payload) : undefined;
      if (!file) state.problem = `payload ${message.payload} of channel ${channel.channel} has no schema file in ${values.schemas}`;
      else {
        state.summary.schema_file = path.basename(file.file);
        state.summary.schema_version_const = file.schema.properties?.schema_version?.const ?? null;
        if (!validators.has(file.file)) validators.set(file.file, ajv.compile(file.schema));
        state.validate = validators.get(file.file);
        if (!headerValidators.has(channel.channel)) {
          headerValidators.set(channel.channel, message.headersSchema ? ajvAsyncApi.compile(message.headersSchema) : null);
        }
        state.headers = headerValidators.get(channel.channel);
      }
    }
    topics[topic] = state;
    return state;
  }

  let lineNo = 0;
  for await (const line of readLines(positionals[0])) {
    lineNo += 1;
    if (!line.trim()) continue;
    let item;
    try {
      item = parseLossless(line);
    } catch (err) {
      throw new UsageError(`input line ${lineNo} is not JSON: ${err.message}`);
    }
    if (!item || typeof item.topic !== 'string') throw new UsageError(`input line ${lineNo} has no "topic"`);
    const state = topicState(item.topic);
    const s = state.summary;
    const errs = [];
    records += 1;
    s.records += 1;
    if (state.problem) errs.push(state.problem);

    // the value, losslessly
    let value = item.value;
    const tombstone = value === null || value === undefined;
    if (tombstone) s.tombstones += 1;
    else if (typeof value === 'string') {
      try {
        value = parseLossless(value);
      } catch (err) {
        errs.push(`value is not JSON: ${err.message}`);
        value = undefined;
      }
    }

    // headers
    const pairs = headerPairs(item.headers);
    const byName = {};
    for (const [name, v] of pairs) {
      if (name in byName) errs.push(`header ${name} appears more than once`);
      byName[name] = v;
      const seen = (s.headers[name] ??= []);
      if (!seen.includes(v) && seen.length < 20) seen.push(v);
    }
    for (const name of REQUIRED_HEADERS) {
      if (!(name in byName)) errs.push(`header ${name} missing`);
      else if (byName[name] === null || byName[name] === '') errs.push(`header ${name} is empty`);
    }
    if ('content-type' in byName && byName['content-type'] !== CONTENT_TYPE) {
      errs.push(`header content-type is ${JSON.stringify(byName['content-type'])}, expected ${CONTENT_TYPE}`);
    }
    if (state.headers && !state.headers(byName)) {
      for (const e of state.headers.errors) errs.push(`headers${e.instancePath} ${e.message} (${JSON.stringify(e.params)})`);
    }

    // the value: schema, twins, schema_version header
    if (!tombstone && value !== undefined) {
      if (state.validate && !state.validate(toPlain(value))) {
        for (const e of state.validate.errors) errs.push(`${e.instancePath || '/'} ${e.message} (${JSON.stringify(e.params)})`);
      }
      const stats = { twins: 0, unsafe: 0 };
      checkTwins(value, '', state.fields, errs, stats);
      s.twins_checked += stats.twins;
      s.unsafe_integers += stats.unsafe;
      const version = value && typeof value === 'object' ? value.schema_version : undefined;
      if ('schema_version' in byName && byName.schema_version !== null) {
        const text = isLosslessNumber(version) ? version.value : JSON.stringify(version);
        if (byName.schema_version !== text) {
          errs.push(`header schema_version ${JSON.stringify(byName.schema_version)} but the value's schema_version is ${text}`);
        }
      }
    }

    if (errs.length) {
      s.invalid += 1;
      failed += 1;
      if (failures.length < maxFailures) {
        failures.push({
          topic: item.topic,
          partition: isLosslessNumber(item.partition) ? Number(item.partition.value) : item.partition ?? null,
          offset: isLosslessNumber(item.offset) ? Number(item.offset.value) : item.offset ?? null,
          key: item.key ?? null,
          errors: errs,
        });
      }
    } else {
      s.valid += 1;
    }
  }

  const out = { ok: failed === 0, records, failed, topics: {}, failures };
  for (const [topic, state] of Object.entries(topics)) {
    state.summary.twin_fields = [...state.fields].sort();
    out.topics[topic] = state.summary;
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
  return failed === 0 ? 0 : 1;
}

main().then(
  (code) => { process.exitCode = code; },
  (err) => {
    process.stderr.write(`validate: ${err instanceof UsageError ? err.message : err && err.stack ? err.stack : err}\n`);
    process.exitCode = 2;
  },
);
