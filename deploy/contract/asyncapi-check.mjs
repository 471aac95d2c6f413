#!/usr/bin/env node
// Check faultstream's AsyncAPI document with the official parser, as a consumer in another
// language would read it.
//
//   node deploy/contract/asyncapi-check.mjs [--asyncapi schemas/asyncapi.yaml] [--schemas schemas/json]
//
// Parses the document with @asyncapi/parser (the AsyncAPI JSON Schema of its version and the
// parser's Spectral ruleset), then checks that every channel's message payload names a JSON
// Schema file of schemas/json (by the file's `title`). Prints one JSON object on stdout:
//
//   {"ok": true|false, "asyncapi": "3.0.0", "errors": N, "diagnostics": [...],
//    "channels": {"attributions": {"address": "faultstream.attributions",
//                 "messages": [{"id", "payload", "schema_file", "headers": bool, "key": {...}}]}},
//    "operations": {"sendAttributions": {"action": "send", "channels": ["attributions"]}},
//    "problems": ["..."]}
//
// Exit status: 0 when the document parses without error-severity diagnostics and every
// payload has its schema file; 1 otherwise (the diagnostics and problems say why); 2 when the
// arguments or files are unusable.

import path from 'node:path';
import { parseArgs } from 'node:util';

import { DEFAULT_ASYNCAPI, DEFAULT_SCHEMAS, channelsBySuffix, parseAsyncApi, schemaFiles } from './contract.mjs';

async function main() {
  const { values } = parseArgs({
    options: {
      asyncapi: { type: 'string', default: DEFAULT_ASYNCAPI },
      schemas: { type: 'string', default: DEFAULT_SCHEMAS },
    },
    strict: true,
  });
  const { document, diagnostics, errors } = await parseAsyncApi(values.asyncapi);
  const report = {
    ok: false,
    file: path.resolve(values.asyncapi),
    asyncapi: document ? document.version() : null,
    errors,
    diagnostics,
    channels: {},
    operations: {},
    problems: [],
  };
  if (document) {
    const files = schemaFiles(values.schemas);
    for (const [suffix, ch] of channelsBySuffix(document)) {
      report.channels[suffix] = {
        channel: ch.channel,
        address: ch.address,
        messages: ch.messages.map((m) => {
          const file = m.payload ? files.get(m.payload) : undefined;
          if (!m.payload) report.problems.push(`channel ${ch.channel}: message ${m.id} has no payload`);
          else if (!file) {
            report.problems.push(`channel ${ch.channel}: payload ${m.payload} has no schema file in ${values.schemas} `
              + '(no *.schema.json with that title)');
          }
          return {
            id: m.id,
            payload: m.payload,
            schema_file: file ? path.basename(file.file) : null,
            headers: m.headersSchema !== null,
            key: m.keySchema,
          };
        }),
      };
      if (ch.messages.length === 0) report.problems.push(`channel ${ch.channel} declares no message`);
    }
    for (const op of document.operations().all()) {
      report.operations[op.id()] = { action: op.action(), channels: op.channels().all().map((c) => c.id()) };
    }
  } else if (errors === 0) {
    report.problems.push('the parser returned no document');
  }
  report.ok = errors === 0 && report.problems.length === 0;
  process.stdout.write(`${JSON.stringify(report, null, 1)}\n`);
  return report.ok ? 0 : 1;
}

main().then(
  (code) => { process.exitCode = code; },
  (err) => {
    process.stderr.write(`asyncapi-check: ${err && err.stack ? err.stack : err}\n`);
    process.exitCode = 2;
  },
);
