import fp from 'fastify-plugin'
import { TenantRegistry, TenantsFileError, demoRegistry } from '../lib/tenants/registry.js'

export type ReloadResult = { ok: true, tenants: number } | { ok: false, error: string }

export interface TenantDirectory {
  /** The registry in force; replaced whole by a successful reload. */
  readonly current: TenantRegistry
  /** Re-reads TENANTS_FILE; a file that does not validate leaves the current registry in place. */
  reload (): Promise<ReloadResult>
}

declare module 'fastify' {
  interface FastifyInstance {
    tenants: TenantDirectory
  }
}

export default fp(async function tenantsPlugin (fastify) {
  const path = fastify.config.tenantsFile
  const options = fastify.config.templatesDir === null ? {} : { templatesDir: fastify.config.templatesDir }
  let current = path === null ? demoRegistry() : await TenantRegistry.fromFile(path, options)
  for (const warning of current.warnings) fastify.log.warn(warning)
  if (path === null) {
    fastify.log.warn('TENANTS_FILE is not set: serving the built-in demo tenant (sandbox keys only, no real mail)')
  }

  const directory: TenantDirectory = {
    get current () { return current },
    async reload () {
      if (path === null) return { ok: true, tenants: current.tenants.size }
      try {
        current = await TenantRegistry.fromFile(path, options)
        for (const warning of current.warnings) fastify.log.warn(warning)
        fastify.log.info({ tenants: current.tenants.size }, 'tenants file reloaded')
        return { ok: true, tenants: current.tenants.size }
      } catch (error) {
        const message = (error as Error).message
        // Every problem of the file, so that one reload shows all there is to fix.
        const problems = error instanceof TenantsFileError ? error.problems : [message]
        fastify.log.error({ reason: message, problems }, 'tenants file reload failed; keeping the previous tenants')
        return { ok: false, error: message }
      }
    }
  }
  fastify.decorate('tenants', directory)
}, { name: 'tenants', dependencies: ['config'], fastify: '5.x' })
