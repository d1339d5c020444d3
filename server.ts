import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import closeWithGrace from 'close-with-grace'
import { ConfigError } from './lib/config/from-env.js'
import { readManifest } from './lib/manifest.js'
import { TenantsFileError } from './lib/tenants-file/load.js'
import { readConfig } from './plugins/config.js'

async function main (): Promise<void> {
  const config = readConfig()
  // The OpenTelemetry SDK is loaded only when tracing is on, and before the app's modules:
  // the Redis instrumentation patches ioredis as it is imported.
  let tracing: { shutdown: () => Promise<void>, plugin: import('fastify').FastifyPluginAsync } | null = null
  if (config.tracing !== null) {
    const [{ startTracing }, { routeInstrumentation }] = await Promise.all([import('./lib/telemetry/tracing.js'), import('./plugins/tracing.js')])
    const routes = routeInstrumentation()
    tracing = { ...startTracing(config.tracing, readManifest().version, [routes.instrumentation]), plugin: routes.plugin }
  }
  const { default: app, internalApp, serverOptions } = await import('./app.js')
  const fastify = Fastify(serverOptions(config))
  if (tracing !== null) await fastify.register(tracing.plugin)
  await fastify.register(app, { config })
  const internal = config.metricsListener === null ? null : Fastify(serverOptions(config))
  if (internal !== null) await internal.register(internalApp, { service: fastify })

  closeWithGrace({
    // The drain, then the grace period: one deadline for both.
    delay: config.shutdownDrainMs + config.shutdownGraceMs,
    // SIGHUP means "reload the tenants file" here, not "shut down" as close-with-grace assumes.
    skip: ['SIGHUP'],
    logger: { error: (problem: unknown) => { fastify.log.error({ err: problem }, 'shutdown problem') } }
  }, async ({ signal, err }) => {
    if (err !== undefined) {
      fastify.log.error({ err }, 'shutting down after an error')
    } else {
      fastify.drain.start()
      fastify.log.info({ signal, drainMs: config.shutdownDrainMs }, 'draining: /readyz answers 503, every route keeps serving')
      await sleep(config.shutdownDrainMs)
      fastify.log.info('shutting down: closing the listeners, finishing in-flight requests')
    }
    // Requests fully received are drained; idle keep-alive connections and requests still
    // arriving are closed (plugins/connections.ts).
    await Promise.all([fastify.close(), internal?.close()])
    // The spans of the last requests are exported before the process ends.
    await tracing?.shutdown()
  })
  process.on('SIGHUP', () => { void fastify.tenants.reload('signal') })

  await fastify.listen({ host: config.host, port: config.port })
  // Started through npm, the PID a person sees is npm's, which neither forwards SIGHUP nor
  // SIGTERM: this line names the process signals must reach.
  fastify.log.info({ pid: process.pid }, `signals go to pid ${process.pid}: SIGHUP reloads the tenants file, SIGTERM drains and stops`)
  if (internal !== null && config.metricsListener !== null) await internal.listen(config.metricsListener)
}

main().catch((error: unknown) => {
  // Configuration problems end start-up with one line naming what to fix.
  if (error instanceof TenantsFileError && error.problems.length > 1) {
    process.stderr.write(`email-otp: tenants file: ${error.problems.length} problems:\n${error.problems.map((problem) => `  ${problem}\n`).join('')}`)
  } else if (error instanceof ConfigError || error instanceof TenantsFileError) {
    process.stderr.write(`email-otp: ${error.message}\n`)
  } else {
    process.stderr.write(`email-otp: start-up failed: ${error instanceof Error ? error.message : String(error)}\n`)
  }
  process.exit(1)
})
