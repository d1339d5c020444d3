import { TenantsFileSchema } from '../../schemas/tenants.js'

/** The tenants file's JSON Schema, as published in schemas/tenants.schema.json. */
export function tenantsJsonSchema (): string {
  return JSON.stringify({ $schema: 'http://json-schema.org/draft-07/schema#', ...TenantsFileSchema }, null, 2) + '\n'
}

if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1])) {
  process.stdout.write(tenantsJsonSchema())
}
