import { register } from 'node:module'
import { context, propagation, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { registerInstrumentations, type Instrumentation } from '@opentelemetry/instrumentation'
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http'
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis'
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { register as registerSyncHooks, supportsSyncHooks } from 'import-in-the-middle/register-hooks.mjs'
import {
  AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider, type Sampler
} from '@opentelemetry/sdk-trace'
import type { TracingConfig } from './config.js'
import { enableSpans } from './spans.js'

/**
 * The OpenTelemetry SDK, loaded (by a dynamic import in server.ts) only when tracing is on, so
 * that a service without OTEL_* variables never loads it. Call before anything imports
 * ioredis: its instrumentation patches the module as it is imported.
 */
export interface Tracing {
  /** Exports what is still queued and stops; the process's last step. */
  shutdown: () => Promise<void>
}

function sampler ({ name, ratio }: TracingConfig['sampler']): Sampler {
  const root = (kind: string): Sampler => {
    switch (kind) {
      case 'always_off': return new AlwaysOffSampler()
      case 'traceidratio': return new TraceIdRatioBasedSampler(ratio)
      default: return new AlwaysOnSampler()
    }
  }
  const parentBased = name.startsWith('parentbased_')
  const kind = parentBased ? name.slice('parentbased_'.length) : name
  return parentBased ? new ParentBasedSampler({ root: root(kind) }) : root(kind)
}

export function startTracing (config: TracingConfig, serviceVersion: string, extra: Instrumentation[] = []): Tracing {
  // ioredis is a CommonJS module imported from ESM: only a loader hook sees that import. The
  // hook wraps ioredis alone. In-thread hooks where Node has them: the off-thread loader makes
  // every later require() a round trip to its thread (a third of a dispatch's CPU, measured).
  if (supportsSyncHooks()) registerSyncHooks({ include: ['ioredis'] })
  else register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, { data: { include: ['ioredis'] } })

  const exporterOptions = { url: config.url, headers: config.headers, timeoutMillis: config.batch.exportTimeoutMillis }
  const exporter = config.protocol === 'http/json' ? new JsonExporter(exporterOptions) : new ProtobufExporter(exporterOptions)
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': config.serviceName, 'service.version': serviceVersion }),
    sampler: sampler(config.sampler),
    spanProcessors: [new BatchSpanProcessor({ exporter, ...config.batch })]
  })
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  propagation.setGlobalPropagator(new W3CTraceContextPropagator())
  trace.setGlobalTracerProvider(provider)
  enableSpans()

  registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      // Command names only: arguments carry key names and script arguments (address hashes,
      // code digests), none of which belongs in a trace.
      new IORedisInstrumentation({ dbStatementSerializer: (command) => command }),
      // Outgoing calls only (the SES API over node:https); incoming requests are the Fastify
      // instrumentation's, named by route.
      new HttpInstrumentation({ disableIncomingRequestInstrumentation: true }),
      new UndiciInstrumentation(),
      ...extra
    ]
  })
  return {
    shutdown: async () => { await provider.shutdown() }
  }
}
