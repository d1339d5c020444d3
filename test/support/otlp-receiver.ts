import { createServer } from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import protobuf from 'protobufjs'
import { until } from './wait.js'

/**
 * The part of the OTLP trace protocol (opentelemetry-proto, trace/v1 and collector/trace/v1) a
 * collector needs to read an export: protobufjs decodes `http/protobuf` bodies with it.
 */
const OTLP_TRACE_PROTO = `
syntax = "proto3";
message AnyValue {
  oneof value {
    string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
    ArrayValue array_value = 5; KeyValueList kvlist_value = 6; bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message InstrumentationScope { string name = 1; string version = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message Status { string message = 2; int32 code = 3; }
message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }
message Link { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4; uint32 dropped_attributes_count = 5; fixed32 flags = 6; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4; fixed32 flags = 16;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; uint32 dropped_attributes_count = 10;
  repeated Event events = 11; uint32 dropped_events_count = 12;
  repeated Link links = 13; uint32 dropped_links_count = 14; Status status = 15;
}
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
`
const ExportTraceServiceRequest = protobuf.parse(OTLP_TRACE_PROTO, { keepCase: false }).root.lookupType('ExportTraceServiceRequest')

/** One span as the receiver got it, ids in hex, attribute values as plain values. */
export interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  kind: number
  attributes: Record<string, unknown>
  links: Array<{ traceId: string, spanId: string }>
  status: { code: number, message: string }
  resource: Record<string, unknown>
  scope: string
}

export interface OtlpReceiver {
  /** The collector's base URL (OTEL_EXPORTER_OTLP_ENDPOINT). */
  url: string
  readonly spans: ReceivedSpan[]
  /** Every request body exactly as it arrived, for scanning. */
  readonly bodies: Buffer[]
  /** The content types exports came with. */
  readonly contentTypes: Set<string>
  waitFor: (check: (spans: ReceivedSpan[]) => boolean, what: string) => Promise<void>
}

// JSON carries ids in hex (the OTLP/JSON mapping); protobuf in bytes, which protobufjs turns
// into base64 with `bytes: String`.
const hexId = (value: unknown, json: boolean): string => typeof value !== 'string' || value === '' ? '' : json ? value.toLowerCase() : Buffer.from(value, 'base64').toString('hex')

function plain (value: any): unknown {
  if (value === null || typeof value !== 'object') return value
  for (const key of ['stringValue', 'boolValue', 'doubleValue', 'bytesValue']) if (key in value) return value[key]
  if ('intValue' in value) return Number(value.intValue)
  if ('arrayValue' in value) return (value.arrayValue.values ?? []).map(plain)
  if ('kvlistValue' in value) return attributes(value.kvlistValue.values)
  return undefined
}

function attributes (list: any[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((entry) => [entry.key, plain(entry.value)]))
}

function spansOf (request: any, json: boolean): ReceivedSpan[] {
  const spans: ReceivedSpan[] = []
  for (const resourceSpans of request.resourceSpans ?? []) {
    const resource = attributes(resourceSpans.resource?.attributes)
    for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
      for (const span of scopeSpans.spans ?? []) {
        spans.push({
          traceId: hexId(span.traceId, json),
          spanId: hexId(span.spanId, json),
          parentSpanId: hexId(span.parentSpanId, json),
          name: span.name,
          kind: Number(span.kind ?? 0),
          attributes: attributes(span.attributes),
          links: (span.links ?? []).map((link: any) => ({ traceId: hexId(link.traceId, json), spanId: hexId(link.spanId, json) })),
          status: { code: Number(span.status?.code ?? 0), message: span.status?.message ?? '' },
          resource,
          scope: scopeSpans.scope?.name ?? ''
        })
      }
    }
  }
  return spans
}

/**
 * A trace collector on loopback that speaks OTLP over HTTP: POST /v1/traces with
 * `application/x-protobuf` (decoded with the OTLP proto above) or `application/json`. It
 * answers 200 with an empty ExportTraceServiceResponse, as a collector does.
 */
export async function startOtlpReceiver (t: Test): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = []
  const bodies: Buffer[] = []
  const contentTypes = new Set<string>()
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const body = Buffer.concat(chunks)
      const type = request.headers['content-type'] ?? ''
      bodies.push(body)
      contentTypes.add(type)
      if (request.method !== 'POST' || request.url !== '/v1/traces') {
        response.writeHead(404).end()
        return
      }
      try {
        if (type.startsWith('application/json')) {
          spans.push(...spansOf(JSON.parse(body.toString('utf8')), true))
          response.writeHead(200, { 'content-type': 'application/json' }).end('{}')
        } else {
          const decoded = ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(body), { bytes: String, longs: String, defaults: false })
          spans.push(...spansOf(decoded, false))
          response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
        }
      } catch {
        response.writeHead(400).end()
      }
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => { resolve() }) }))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    bodies,
    contentTypes,
    waitFor: async (check, what) => { await until(what, () => check(spans), 60_000) }
  }
}
