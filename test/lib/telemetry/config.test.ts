import t from 'tap'
import { ConfigError, parseConfig } from '../../../lib/config/from-env.js'

t.test('tracing is off unless an OTLP endpoint or OTEL_TRACES_EXPORTER=otlp asks for it', async (t) => {
  t.equal(parseConfig({}).tracing, null, 'nothing set: off')
  t.equal(parseConfig({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' }).tracing, null, 'settings without an exporter: off')
  t.equal(parseConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' }).tracing, null, 'none wins over an endpoint')
  t.equal(parseConfig({ OTEL_TRACES_EXPORTER: 'otlp' }).tracing?.url, 'http://localhost:4318/v1/traces', 'otlp alone: the specification\'s default endpoint')
})

t.test('the traces URL, protocol and service name follow the OTLP exporter specification', async (t) => {
  const base = parseConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://collector.example:4318/otlp/' }).tracing
  t.equal(base?.url, 'https://collector.example:4318/otlp/v1/traces', 'the base URL gets /v1/traces')
  t.equal(base?.protocol, 'http/protobuf', 'http/protobuf by default')
  t.equal(base?.serviceName, 'email-otp')
  const exact = parseConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:9999/custom', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).tracing
  t.equal(exact?.url, 'http://b:9999/custom', 'the traces URL is taken as is')
  t.equal(exact?.protocol, 'http/json')
  t.equal(parseConfig({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' }).tracing?.protocol, 'http/protobuf', 'the traces protocol overrides')
  t.throws(() => parseConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }), ConfigError, 'gRPC is refused at start-up')
})

t.test('sampler and batch settings', async (t) => {
  const tracing = parseConfig({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01', OTEL_BSP_MAX_QUEUE_SIZE: '100', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '512', OTEL_BSP_SCHEDULE_DELAY: '250' }).tracing
  t.same(tracing?.sampler, { name: 'parentbased_traceidratio', ratio: 0.01 })
  t.same(tracing?.batch, { scheduledDelayMillis: 250, exportTimeoutMillis: 30000, maxQueueSize: 100, maxExportBatchSize: 100 }, 'a batch is never larger than the queue')
  t.equal(parseConfig({ OTEL_TRACES_EXPORTER: 'otlp' }).tracing?.sampler.ratio, 1)
  t.throws(() => parseConfig({ OTEL_TRACES_SAMPLER_ARG: '1.5' }), ConfigError, 'a ratio above 1 is refused')
  t.throws(() => parseConfig({ OTEL_TRACES_SAMPLER: 'jaeger_remote' }), ConfigError)
})

t.test('OTEL_EXPORTER_OTLP_HEADERS: parsed, and never echoed in an error', async (t) => {
  t.same(parseConfig({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_HEADERS: 'Authorization=Bearer%20s3cret, x-tenant=a' }).tracing?.headers, { authorization: 'Bearer s3cret', 'x-tenant': 'a' })
  const error = t.throws(() => parseConfig({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_HEADERS: 'api-key s3cret' })) as Error
  t.match(error.message, /OTEL_EXPORTER_OTLP_HEADERS/)
  t.notMatch(error.message, /s3cret/)
  t.throws(() => parseConfig({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_HEADERS: 'a=%0d%0aInjected: 1' }), ConfigError, 'no header injection')
})
