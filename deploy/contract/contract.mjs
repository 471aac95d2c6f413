// What validate.mjs and asyncapi-check.mjs share: reading faultstream's AsyncAPI document
// with the official parser (@asyncapi/parser), the JSON Schema files of schemas/json, and
// the RFC 3339 form of an integer of UTC nanoseconds.

import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { DiagnosticSeverity, Parser, fromFile } from '@asyncapi/parser';

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** The repository root (deploy/contract/../..). */
export const REPO = path.resolve(HERE, '..', '..');
/** Default paths of the contract files, in the repository. */
export const DEFAULT_ASYNCAPI = path.join(REPO, 'schemas', 'asyncapi.yaml');
export const DEFAULT_SCHEMAS = path.join(REPO, 'schemas', 'json');

const SEVERITY = {
  [DiagnosticSeverity.Error]: 'error',
  [DiagnosticSeverity.Warning]: 'warning',
  [DiagnosticSeverity.Information]: 'information',
  [DiagnosticSeverity.Hint]: 'hint',
};

/**
 * Parse an AsyncAPI document with @asyncapi/parser (schema validation and its Spectral
 * ruleset included).
 *
 * @param {string} file path of the YAML or JSON document
 * @returns {Promise<{document: object|undefined, diagnostics: object[], errors: number}>}
 *   `document` is the parsed model (undefined when the document has errors), `diagnostics`
 *   the parser's findings as plain objects `{severity, code, message, path, range}`
 *   (severity: error | warning | information | hint), `errors` how many are errors.
 * @throws when the file cannot be read
 */
export async function parseAsyncApi(file) {
  const parser = new Parser();
  const { document, diagnostics } = await fromFile(parser, file).parse();
  const plain = diagnostics.map((d) => ({
    severity: SEVERITY[d.severity] ?? String(d.severity),
    code: String(d.code),
    message: d.message,
    path: d.path,
    range: d.range,
  }));
  return { document, diagnostics: plain, errors: plain.filter((d) => d.severity === 'error').length };
}

/**
 * The channels of a parsed AsyncAPI document, keyed by the topic name without its prefix
 * (`faultstream.attributions` -> `attributions`; an address `{prefix}.attributions` too).
 *
 * @param {object} document a document from parseAsyncApi
 * @returns {Map<string, {channel: string, address: string, messages: object[]}>} every
 *   message as `{id, name, payload: <component schema id, e.g. "Attribution">,
 *   payloadSchema: <the payload JSON Schema>, headersSchema: <JSON Schema or null>,
 *   keySchema: <the Kafka binding's key schema or null>}`
 */
export function channelsBySuffix(document) {
  const out = new Map();
  for (const channel of document.channels().all()) {
    const address = channel.address() ?? channel.id();
    const dot = address.indexOf('.');
    const suffix = dot >= 0 ? address.slice(dot + 1) : address;
    const messages = channel.messages().all().map((m) => {
      const payload = m.payload();
      const kafka = m.bindings().get('kafka');
      return {
        id: m.id(),
        name: m.name(),
        payload: payload ? payload.id() : null,
        payloadSchema: payload ? payload.json() : null,
        headersSchema: m.hasHeaders() ? m.headers().json() : null,
        keySchema: kafka ? (kafka.value().key ?? null) : null,
      };
    });
    out.set(suffix, { channel: channel.id(), address, messages });
  }
  return out;
}

/**
 * The JSON Schema files of a directory (`*.schema.json`), keyed by their `title`.
 *
 * @param {string} dir e.g. schemas/json
 * @returns {Map<string, {file: string, stem: string, schema: object}>} `stem` is the file
 *   name without `.schema.json` (`attribution`, `dead_letter`)
 * @throws when a file cannot be read or is not JSON, or two files share a title
 */
export function schemaFiles(dir) {
  const out = new Map();
  for (const name of readdirSync(dir).filter((n) => n.endsWith('.schema.json')).sort()) {
    const file = path.join(dir, name);
    const schema = JSON.parse(readFileSync(file, 'utf8'));
    const title = schema.title ?? name;
    if (out.has(title)) {
      throw new Error(`${file} and ${out.get(title).file} both have the title ${JSON.stringify(title)}`);
    }
    out.set(title, { file, stem: name.slice(0, -'.schema.json'.length), schema });
  }
  return out;
}

const NS = 1_000_000_000n;

/**
 * RFC 3339 text in UTC with exactly nine fractional digits of an instant given as integer
 * nanoseconds since the Unix epoch: `1714564800123456789n` -> `"2024-05-01T12:00:00.123456789Z"`.
 *
 * @param {bigint} ns UTC nanoseconds (exact: a BigInt, never a double)
 * @returns {string|null} null for an instant outside the years 0000..9999 RFC 3339 can write
 */
export function rfc3339FromNs(ns) {
  let seconds = ns / NS;
  let frac = ns % NS;
  if (frac < 0n) {
    frac += NS;
    seconds -= 1n;
  }
  const ms = Number(seconds) * 1000;
  const date = new Date(ms);
  if (Number.isNaN(date.getTime())) return null;
  const iso = date.toISOString();
  if (!/^\d{4}-/.test(iso)) return null;
  return `${iso.slice(0, 19)}.${frac.toString().padStart(9, '0')}Z`;
}
