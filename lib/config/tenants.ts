import { EnvSchema, type Env } from '../../schemas/env.js'
import { TemplateFolders, blockListFiles, templatesRootProblem } from '../mail/templating/template-files.js'
import { ConfigError } from './error.js'
import type { AbuseConfig } from './abuse.js'

/** The tenants file, its size cap and the tenants' template folders. */
export interface TenantsConfig {
  tenantsFile: string | null
  /** The root of the tenants' template folders (`<root>/<tenant id>/`); null without a tenants file. */
  templatesDir: string | null
  /** TENANTS_FILE_MAX_BYTES: a larger tenants file is refused before it is read. */
  tenantsFileMaxBytes: number
}

/** `blocklists`: files the template root must keep clear of. */
export function tenantsConfig (env: Env, blocklists: AbuseConfig['blocklists']): TenantsConfig {
  return { tenantsFile: env.TENANTS_FILE ?? null, templatesDir: templatesFolder(env, blocklists), tenantsFileMaxBytes: env.TENANTS_FILE_MAX_BYTES }
}

/**
 * TEMPLATES_DIR, or `templates/` beside the tenants file: a folder that holds tenants'
 * template files and nothing else the service reads.
 */
function templatesFolder (env: Env, blocklists: AbuseConfig['blocklists']): string | null {
  if (env.TENANTS_FILE === undefined) {
    if (env.TEMPLATES_DIR !== undefined) throw new ConfigError('TEMPLATES_DIR', 'is only used with TENANTS_FILE')
    if (env.TENANTS_FILE_MAX_BYTES !== EnvSchema.properties.TENANTS_FILE_MAX_BYTES.default) throw new ConfigError('TENANTS_FILE_MAX_BYTES', 'is only used with TENANTS_FILE')
    return null
  }
  const root = env.TEMPLATES_DIR ?? TemplateFolders.besideTenantsFile(env.TENANTS_FILE)
  const problem = templatesRootProblem(root, { tenantsFile: env.TENANTS_FILE, others: blockListFiles(blocklists.ipSources, blocklists.torSource) })
  if (problem !== null) throw new ConfigError('TEMPLATES_DIR', `${env.TEMPLATES_DIR === undefined ? '(unset: templates/ beside TENANTS_FILE) ' : ''}${problem}`)
  return root
}
